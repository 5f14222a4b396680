"""Sessions, the task state machine, the event bus and the public facade."""

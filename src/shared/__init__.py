"""Types shared across layers and processes; imports nothing else of ours."""

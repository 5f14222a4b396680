"""Shell command parsing for the sandbox and the policy engine."""

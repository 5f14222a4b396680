"""The local tool sandbox: workspace files, judged commands, SSRF-guarded network."""

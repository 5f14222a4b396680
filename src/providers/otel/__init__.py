"""OpenTelemetry: the kernel's spans sent to a collector over OTLP, with GenAI attributes."""

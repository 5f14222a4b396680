"""Tools shipped with the kernel, each registered under the ``core_agent.tools`` entry point."""

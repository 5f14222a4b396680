"""``core-agent chat``: an interactive assistant over a session, in the terminal.

The prompt comes first and the kernel after: the banner and the prompt are written before
anything heavy is imported (``first_paint``), the line editor takes them over, and the kernel
is built in a worker thread once the editor has drawn the prompt (``chat_kernel``), so typing
can start at once. ``repl`` is the loop (turns, Ctrl-C, the status line), ``slash_commands``
the ``/`` commands, ``rendering`` how a turn looks, ``approval_prompt`` the inline question
about a risky call, ``line_editor`` the prompt_toolkit editor and its history,
``project_instructions`` the workspace's ``AGENTS.md``.

Nothing is imported here: ``core-agent`` imports this package only for ``chat``.
"""

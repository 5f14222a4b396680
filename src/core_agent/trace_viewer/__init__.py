"""The trace viewer: ``core-agent ui`` serves the tasks, their spans and approvals in a browser.

A local page (127.0.0.1 only, a random token in its URL) with the task list, one task's span
waterfall, conversation, policy decisions and approvals, and buttons that answer a pending
request. Built on Starlette, uvicorn and Jinja2 (the ``ui`` extra); every asset is in this
package, nothing is fetched from elsewhere.
"""

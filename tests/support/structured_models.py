"""Response models of the tests, in a module of their own: a process finds one by name only
if it imported this module (``core_agent.kernel.response_models``)."""

from pydantic import BaseModel


class Restock(BaseModel):
    """What the structured tasks of ``support.structured_host`` answer with."""

    service: str
    restarted: bool
    items: int

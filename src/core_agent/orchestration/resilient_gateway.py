"""Provider resilience owned by the kernel: retries, a deadline, circuit breakers, fallbacks.

``ResilientGateway`` wraps any ``ILLMGateway`` (litellm's or a third party's) and its
fallback models, in order. One call:

1. tries the first model whose circuit breaker lets it through (an open breaker fails fast
   with ``ModelCircuitOpenError``, and the next model is tried);
2. retries it on retryable errors (``ModelError.retryable``) up to ``max_retries`` times,
   waiting as ``model_retry`` says (``Retry-After`` honoured up to a cap, else backoff with
   jitter); the tries are run by tenacity;
3. when its retries are spent (or its breaker opens meanwhile), moves to the next model;
4. never runs past the call's deadline: a try still running then is cancelled (raising
   ``ModelDeadlineError``), and a wait that would end after it is not started: the next
   model is tried instead, and only when none is left is ``ModelDeadlineError`` raised.

A non-retryable error (bad credentials, a refused request, a prompt too long) ends the call
at once with that error: another try or model would be refused the same way, or the caller
(the ReAct loop, for a prompt too long) is the one to act.

Answers are checked before they count as success, whatever the gateway: a stream that ends
without its final response, a response with neither text nor tool calls, or tool-call
arguments cut by the token limit is a retryable ``ModelIncompleteError`` (``checked_response``).
A try whose answer was thrown away was still paid for: its usage (``ModelError.usage``) goes
with the answer that follows, apart from the answer's own (``LLMResponse.retried_usage``), or,
when the call fails, with the error it raises.

Every try is reported through ``model_attempts`` (the caller traces it). When a streamed call
is tried again, the new try streams its text from the start; deltas of the failed try have
already been yielded (``traced_model_call`` numbers them by try so a host can discard them).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import anyio
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from core_agent.contracts.errors import (
    ModelCircuitOpenError,
    ModelDeadlineError,
    ModelError,
    ModelIncompleteError,
)
from core_agent.contracts.llm_gateway import (
    ILLMGateway,
    LLMRequest,
    LLMResponse,
    LLMStreamItem,
    checked_response,
)
from core_agent.orchestration.circuit_breaker import BreakerSettings, CircuitBreaker
from core_agent.orchestration.model_attempts import AttemptOutcome, ModelAttempt, report_attempt
from core_agent.orchestration.model_retry import BackoffWait, RetryPolicy, is_retryable
from shared.agent_protocol import TokenUsage

Sleep = Callable[[float], Awaitable[None]]


@dataclass(slots=True)
class _Call:
    """What one logical call has done so far."""

    deadline: float
    tries: int = 0
    started_at: datetime | None = None
    deadline_passed_by: float | None = None
    """The wait that would have ended past the deadline, when that stopped the retries."""
    spent: TokenUsage | None = None
    """What the tries that failed with an answer still cost (``ModelError.usage``)."""
    passed_over: list[str] = field(default_factory=list)
    """Why each model fallen back from failed (``model: error``), for the final error."""


class ResilientGateway(ILLMGateway):
    """An ``ILLMGateway`` that retries, falls back and fails fast (see the module docstring).

    ``clock`` and ``sleep`` are the seams that let tests drive time: ``clock`` is read for the
    deadline and the breakers; ``sleep`` waits between tries (it must be cancellable).
    """

    def __init__(
        self,
        models: Sequence[ILLMGateway],
        *,
        policy: RetryPolicy | None = None,
        breaker: BreakerSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        if not models:
            raise ValueError("ResilientGateway needs at least one model")
        self.models = list(models)
        self.policy = policy or RetryPolicy()
        self._clock = clock
        self._sleep = sleep
        self.breakers = [CircuitBreaker(m.model_name, breaker, clock=clock) for m in self.models]

    @property
    def model_name(self) -> str:
        """The primary model's name (a fallback's answer names its own model)."""
        return self.models[0].model_name

    def context_window(self) -> int | None:
        """The primary model's window."""
        return self.models[0].context_window()

    def warm_up(self) -> None:
        """Warms the primary model only: a fallback's libraries load if it is ever needed."""
        self.models[0].warm_up()

    @asynccontextmanager
    async def connections(self) -> AsyncIterator[None]:
        """Every model's connection scope, the fallbacks' too (``ILLMGateway.connections``)."""
        async with AsyncExitStack() as stack:
            for model in self.models:
                await stack.enter_async_context(model.connections())
            yield

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """One completion, tried as the module docstring says.

        Raises:
            ModelError: The last error when every try failed; ``ModelDeadlineError`` when
                the deadline ran out; ``ModelCircuitOpenError`` when every model's breaker is
                open.
        """
        response: LLMResponse | None = None
        async for item in self._run(request, stream=False):
            if isinstance(item, LLMResponse):
                response = item
        assert response is not None  # _run ends with a response or raises
        return response

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        """A streamed completion, tried as the module docstring says; raises as ``complete``."""
        async for item in self._run(request, stream=True):
            yield item

    async def _run(self, request: LLMRequest, *, stream: bool) -> AsyncIterator[LLMStreamItem]:
        call = _Call(deadline=self._clock() + self.policy.call_deadline_s)
        try:
            last = len(self.models) - 1
            for index, (model, breaker) in enumerate(zip(self.models, self.breakers, strict=True)):
                try:
                    async for item in self._tries(model, breaker, request, call, stream=stream):
                        yield item
                    return
                except ModelCircuitOpenError as exc:
                    await self._report(call, model, "skipped", exc, started=False)
                    if index == last:
                        raise
                    call.passed_over.append(f"{model.model_name}: {exc}")
                except ModelError as exc:
                    if isinstance(exc, ModelDeadlineError):
                        await self._report(call, model, "failed", exc)
                        raise
                    moving_on = exc.retryable and index < last
                    if call.deadline_passed_by is not None:
                        # This model asked for a wait the deadline has no room for; the next
                        # one may answer at once, so only the last model's wait ends the call.
                        late = self._deadline_error(exc, call.deadline_passed_by)
                        call.deadline_passed_by = None
                        await self._report(call, model, "fallback" if moving_on else "failed", late)
                        if not moving_on:
                            raise late from exc
                        call.passed_over.append(f"{model.model_name}: {late}")
                        continue
                    await self._report(call, model, "fallback" if moving_on else "failed", exc)
                    if not moving_on:
                        raise
                    call.passed_over.append(f"{model.model_name}: {exc}")
        except ModelError as exc:
            # The call failed: the tries it paid for go with its error, and the error says
            # why the models before the last one were given up, not only the last's.
            exc.usage = call.spent
            if call.passed_over and exc.args and isinstance(exc.args[0], str):
                exc.args = (f"{exc.args[0]} (after {'; '.join(call.passed_over)})", *exc.args[1:])
            raise

    async def _tries(
        self,
        model: ILLMGateway,
        breaker: CircuitBreaker,
        request: LLMRequest,
        call: _Call,
        *,
        stream: bool,
    ) -> AsyncIterator[LLMStreamItem]:
        """The tries of one model; raises the error of the last when none answered.

        The first try runs on its own: most calls are answered by it, and tenacity's
        bookkeeping costs tens of microseconds a call. Only when it fails with a retryable
        error do the tries go through tenacity, whose first attempt hands back that error
        (no request is sent again for it), so the waits and the stop rule count it as usual.
        """
        try:
            async for item in self._try(model, breaker, request, call, stream=stream):
                yield item
            return
        except ModelError as exc:
            if not is_retryable(exc):
                raise
            first: ModelError | None = exc

        def stop(state: RetryCallState) -> bool:
            if state.attempt_number > self.policy.max_retries or breaker.state == "open":
                return True
            if self._clock() + state.upcoming_sleep >= call.deadline:
                call.deadline_passed_by = state.upcoming_sleep
                return True
            return False

        async def before_sleep(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            assert isinstance(error, ModelError)
            await self._report(call, model, "retry", error, wait_s=state.upcoming_sleep)

        retrying = AsyncRetrying(
            retry=retry_if_exception(is_retryable),
            wait=BackoffWait(self.policy),
            stop=stop,
            sleep=self._sleep,
            before_sleep=before_sleep,
            reraise=True,
        )
        # tenacity's attempt block swallows whatever the try raises and re-raises it at once
        # unless ``retry`` accepts it: only retryable ModelErrors are tried again; anything
        # else (cancellation, the consumer closing the stream) goes straight through.
        async for attempt in retrying:
            with attempt:
                if first is not None:
                    error, first = first, None
                    raise error
                async for item in self._try(model, breaker, request, call, stream=stream):
                    yield item

    async def _try(
        self,
        model: ILLMGateway,
        breaker: CircuitBreaker,
        request: LLMRequest,
        call: _Call,
        *,
        stream: bool,
    ) -> AsyncIterator[LLMStreamItem]:
        """One try through ``breaker``: the stream's items, then the checked response."""
        ticket = breaker.acquire()
        call.tries += 1
        call.started_at = datetime.now(UTC)
        try:
            response: LLMResponse | None = None
            async for item in self._one_try(model, request, call, stream=stream):
                if isinstance(item, LLMResponse):
                    response = item
                else:
                    yield item
            checked = _checked(response)
        except ModelError as exc:
            if exc.usage is not None:
                call.spent = exc.usage if call.spent is None else call.spent + exc.usage
            if exc.retryable or isinstance(exc, ModelDeadlineError):
                breaker.record_failure(ticket)
            else:
                breaker.release(ticket)
            raise
        except BaseException:
            breaker.release(ticket)
            raise
        breaker.record_success(ticket)
        await self._report(call, model, "ok", None)
        if call.spent is not None:  # the tries before it were paid for too
            checked = replace(checked, retried_usage=call.spent)
        yield checked

    async def _one_try(
        self, model: ILLMGateway, request: LLMRequest, call: _Call, *, stream: bool
    ) -> AsyncIterator[LLMStreamItem]:
        """One request, cut off at the deadline."""
        if not stream:
            with self._deadline_scope(call, model) as scope:
                response = await model.complete(request)
            if scope.cancelled_caught:
                raise self._late(model)
            yield response
            return
        items = model.stream(request)
        try:
            while True:
                # A scope per item: a scope must not span a yield (the consumer's code would
                # run inside it). ``move_on_after`` rather than ``fail_after``, a generator
                # wrapped around it: this runs for every item of every stream.
                with self._deadline_scope(call, model) as scope:
                    try:
                        item = await anext(items)
                    except StopAsyncIteration:
                        return
                if scope.cancelled_caught:
                    raise self._late(model)
                yield item
        finally:
            close = getattr(items, "aclose", None)
            if close is not None:
                with anyio.CancelScope(shield=True):
                    await close()

    def _deadline_scope(self, call: _Call, model: ILLMGateway) -> anyio.CancelScope:
        """A scope cancelled when the call's deadline passes; ``ModelDeadlineError`` if it has."""
        left = call.deadline - self._clock()
        if left <= 0:
            raise self._late(model)
        return anyio.move_on_after(left)

    def _late(self, model: ILLMGateway) -> ModelDeadlineError:
        # Built only when needed: a deadline scope wraps every item of every stream.
        return ModelDeadlineError(
            f"model {model.model_name!r} was still answering when the call's "
            f"{self.policy.call_deadline_s:g} s deadline ran out"
        )

    def _deadline_error(self, cause: ModelError, wait_s: float) -> ModelDeadlineError:
        deadline = self.policy.call_deadline_s
        if cause.retry_after_s is not None:
            why = (
                f"the provider asked to wait {cause.retry_after_s:g} s (Retry-After; honoured "
                f"up to {self.policy.retry_after_cap_s:g} s)"
            )
        else:
            why = f"the next try was due in {wait_s:.2f} s"
        return ModelDeadlineError(
            f"model call gave up: {why}, which would end past the call's {deadline:g} s "
            f"deadline. Last error: {cause}",
            status_code=cause.status_code,
            body=cause.body,
            retry_after_s=cause.retry_after_s,
        )

    async def _report(
        self,
        call: _Call,
        model: ILLMGateway,
        outcome: AttemptOutcome,
        error: ModelError | None,
        *,
        wait_s: float | None = None,
        started: bool = True,
    ) -> None:
        now = datetime.now(UTC)
        if not started:
            call.tries += 1
        await report_attempt(
            ModelAttempt(
                number=call.tries,
                model=model.model_name,
                outcome=outcome,
                started_at=call.started_at if started and call.started_at else now,
                ended_at=now,
                error=f"{type(error).__name__}: {error}" if error is not None else None,
                status_code=error.status_code if error is not None else None,
                retry_after_s=error.retry_after_s if error is not None else None,
                wait_s=wait_s,
            )
        )


def _checked(response: LLMResponse | None) -> LLMResponse:
    """``response`` if it is a real answer; else a retryable ``ModelIncompleteError``."""
    if response is None:
        raise ModelIncompleteError(
            "the model's stream ended without a final response", retryable=True
        )
    return checked_response(response)

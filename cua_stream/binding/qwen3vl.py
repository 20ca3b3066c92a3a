"""``Qwen3VLComputer1``: Harbor's computer-1 agent, adapted to a Qwen3-VL policy behind a session gateway.

It keeps Harbor's generic strict-JSON loop, runtime, compaction and recorder, and changes six things:

1. Coordinates: the model answers on Qwen3-VL's normalized 0..999 grid. The provider marks every parsed
   action as ``CoordinateSpace.NORMALIZED_0_999`` so Harbor's runtime maps it to desktop pixels, and the
   prompt says so (``coordinates.normalized_prompt``).
2. Screenshots: every screenshot passes through ``_screenshot_ref``, Harbor's single point where a
   capture becomes a data URL (initial, follow-up, post-compaction and fallback images alike); it is
   resized there to Qwen3-VL's 32-pixel grid under a pixel cap (``screenshots.fit_data_url``).
3. Markers: compactor summaries and the final-answer fallback carry a ``cua_call_kind`` marker
   (``markers``, ``session_llm``), so the gateway can tell them from agent turns; and the per-turn debug
   logs lose the session key Harbor would otherwise write there.
4. Name: trajectories and ``agent_info`` say ``qwen3vl-computer-1``, not ``computer-1``.
5. Readiness (opt-in, ``ready_probe``): computer-1 takes its first screenshot right after typing
   ``start_url`` into the address bar, often of a page still loading; the policy's first observation is
   then a blank browser and its first turn a ``wait`` (an oracle recorded 4 to 12 such turns in 24
   demonstrations). The task's probe is polled first, so every episode starts on the drawn page. The
   navigation is typed (ctrl+L, the URL, Return by xdotool), and a busy desktop can lose the typing: CI
   caught a browser left on about:blank, its address bar selected, the URL never in it, the probe
   failing for its whole 30 s. So while the probe keeps failing, ``start_url`` is opened again — after
   ``ready_renavigate_sec``, then at doubling intervals (a slow page gets longer each time to finish) —
   through the DevTools endpoint computer-1's Chromium listens on (a new foreground tab, no keystrokes),
   or typed again where that endpoint does not answer.
6. Parse errors (opt-in, ``max_parse_errors``): after that many consecutive replies that do not parse,
   the episode ends (``early_termination_reason = "parse_error_limit"``) instead of asking again until
   the turn limit; the verifier scores what was done. A small policy that derails rarely recovers, and
   every turn after the derailment is generation time and trained tokens that carry no credit.

Build it with ``AgentConfig(name=None, import_path=...)`` (see ``computer1.QWEN3VL_IMPORT_PATH``): Harbor
builds its own registered class whenever the config names a registered agent, import path or not.
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath
from typing import Any, override

import anyio.to_thread
from harbor.agents.computer_1.computer_1 import Computer1, Computer1Options
from harbor.agents.computer_1.providers.base import ModelStep
from harbor.agents.computer_1.providers.generic import GenericJsonProvider
from harbor.agents.computer_1.runtime import ComputerAction, CoordinateSpace
from harbor.llms.base import LLMResponse
from pydantic import Field

from cua_stream.binding.coordinates import coordinate_problem, normalized_prompt
from cua_stream.binding.markers import MarkingCompactor, marking
from cua_stream.binding.screenshots import DEFAULT_MAX_PIXELS, MIN_PIXELS, fit_data_url
from cua_stream.binding.session_llm import SessionLLM
from cua_stream.events import CallKind

AGENT_NAME = "qwen3vl-computer-1"
PROBE_INTERVAL_S = 0.1
DEVTOOLS_NEW_TAB = "http://127.0.0.1:9222/json/new?"
"""Chromium's DevTools HTTP endpoint that opens a tab (computer-1 starts it with --remote-debugging-port
9222, and probes it for readiness itself)."""


class Qwen3VLComputer1Options(Computer1Options):
    """Computer-1's options plus the screenshot budget (Harbor forbids unknown options)."""

    screenshot_max_pixels: int = Field(
        default=DEFAULT_MAX_PIXELS,
        ge=MIN_PIXELS,
        description="Pixel cap of each screenshot sent to the model (sides are multiples of 32).",
    )

    max_parse_errors: int | None = Field(
        default=None,
        ge=1,
        description="End the episode after this many consecutive replies that do not parse "
        "(None: ask again until max_turns, as computer-1 does).",
    )

    ready_probe: str | None = Field(
        default=None,
        description="A shell command run in the environment after start_url's navigation until it exits 0, "
        "before the first screenshot (the task's own sign that its page is drawn).",
    )

    ready_timeout_sec: float = Field(
        default=30.0,
        gt=0,
        description="How long ready_probe may keep failing; then the first screenshot is taken anyway.",
    )

    ready_renavigate_sec: float = Field(
        default=8.0,
        gt=0,
        description="While ready_probe fails, navigate to start_url again after this long, then at "
        "doubling intervals (a typed navigation lost by a browser not yet ready is retried).",
    )


class ParseErrorLimit(Exception):
    """The episode's consecutive parse errors reached ``max_parse_errors`` (caught by the agent loop)."""


class Qwen3VLJsonProvider(GenericJsonProvider):
    """Harbor's strict-JSON dialect with coordinates on the normalized 0..999 grid."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._prompt_template = normalized_prompt(self._prompt_template)
        self.parse_errors = 0
        """Consecutive replies that did not parse, up to the latest."""

    @override
    def parse(self, llm_response: LLMResponse) -> ModelStep:
        step = self._parse(llm_response)
        self.parse_errors = self.parse_errors + 1 if step.needs_retry else 0
        return step

    def _parse(self, llm_response: LLMResponse) -> ModelStep:
        step = super().parse(llm_response)
        if step.action is not None:
            problem = coordinate_problem(step.action)
            if problem is not None:  # Harbor's own parse-error path: an observation, no action run
                feedback = f"ERROR: {problem}"
                return ModelStep(action=None, needs_retry=True, feedback=feedback, llm_response=llm_response)
            # The runtime maps x/y, end_x/end_y and zoom_region of such actions to desktop pixels.
            step.action.source = CoordinateSpace.NORMALIZED_0_999.value
        return step


class Qwen3VLComputer1(Computer1):
    """computer-1 for a Qwen3-VL policy: normalized coordinates, grid-sized screenshots, marked calls."""

    options_model = Qwen3VLComputer1Options
    options: Qwen3VLComputer1Options

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self._provider_name != "litellm" or self._llm is None:
            raise ValueError(
                f"{AGENT_NAME} runs on computer-1's generic JSON harness only; pass provider='litellm' "
                f"(got provider {self._provider_name!r})"
            )
        # Every LLM request of this agent goes through the session view (agent loop, fallback, and the
        # compactor, which is rebuilt around it with the same wiring Computer1.__init__ gave the stock one).
        self._llm = SessionLLM(self._llm)
        self._probed = False
        self._compactor = MarkingCompactor(
            self._llm,  # type: ignore[arg-type]  # duck-typed LiteLLM
            self._model_name,
            self.logger,
            self._build_fresh_prompt_after_compaction,
            self._recorder.record_context_compaction,
            self._PROACTIVE_COMPACTION_FREE_TOKENS,
            self._UNWIND_TARGET_FREE_TOKENS,
        )

    @staticmethod
    @override
    def name() -> str:
        return AGENT_NAME

    @override
    def _build_provider(self) -> Qwen3VLJsonProvider:
        return Qwen3VLJsonProvider.from_agent(self)

    @override
    async def _run_loop(self, *args: Any, **kwargs: Any) -> None:
        try:
            await super()._run_loop(*args, **kwargs)
        except ParseErrorLimit:
            self._early_termination_reason = "parse_error_limit"

    @override
    async def _query_litellm(self, *args: Any, **kwargs: Any) -> LLMResponse:
        # Checked before the next call, so the last failed reply is in the trajectory like any other.
        limit, provider = self.options.max_parse_errors, self._provider
        if limit is not None and isinstance(provider, Qwen3VLJsonProvider) and provider.parse_errors >= limit:
            raise ParseErrorLimit(f"{provider.parse_errors} consecutive replies did not parse")
        return await super()._query_litellm(*args, **kwargs)

    @override
    async def _capture_screenshot(self, env_path: PurePosixPath | str) -> str:
        if not self._probed:  # the first capture is the initial observation, taken after start_url
            self._probed = True
            await self._wait_until_ready()
        return await super()._capture_screenshot(env_path)

    async def _wait_until_ready(self) -> None:
        probe, session = self.options.ready_probe, self._session
        if probe is None or session is None:
            return
        started = anyio.current_time()
        deadline = started + self.options.ready_timeout_sec
        interval = self.options.ready_renavigate_sec
        renavigate_at = started + interval
        while True:
            result = await session.environment.exec(
                probe, timeout_sec=10, user=session.environment.default_user
            )
            if result.return_code == 0:
                self.logger.debug("ready_probe passed after %.1fs", anyio.current_time() - started)
                return
            if anyio.current_time() >= deadline:
                self.logger.warning(
                    "ready_probe still failing after %ss (exit %s): taking the first screenshot anyway",
                    self.options.ready_timeout_sec, result.return_code,
                )  # fmt: skip
                return
            if not await session.is_session_alive():  # a killed container: the screenshot says so at once
                self.logger.warning(
                    "the desktop is gone (exit %s): not waiting for the page", result.return_code
                )
                return
            if self.options.start_url and anyio.current_time() >= renavigate_at:
                self.logger.warning(
                    "ready_probe failing for %.1fs (exit %s): navigating to start_url again",
                    anyio.current_time() - started, result.return_code,
                )  # fmt: skip
                await self._open_start_url(session)
                interval *= 2
                renavigate_at = anyio.current_time() + interval
            await anyio.sleep(PROBE_INTERVAL_S)

    async def _open_start_url(self, session: Any) -> None:
        """Open ``start_url`` again: in a new foreground tab through Chromium's DevTools endpoint (no
        keystrokes to lose), else typed into the address bar as computer-1 does."""
        url = self.options.start_url or ""
        opened = await session.environment.exec(
            f"curl -sf -o /dev/null --max-time 5 -X PUT {shlex.quote(DEVTOOLS_NEW_TAB + url)}",
            timeout_sec=10,
            user=session.environment.default_user,
        )
        if opened.return_code != 0:
            await session.execute(ComputerAction(type="navigate", url=url))

    @override
    async def _screenshot_ref(self, path: str) -> str:
        ref = await super()._screenshot_ref(path)
        # Decode + resize + encode of a desktop-sized image takes tens of ms: keep it off the event loop.
        return await anyio.to_thread.run_sync(
            lambda: fit_data_url(ref, max_pixels=self.options.screenshot_max_pixels)
        )

    @override
    async def _litellm_extract_text_fallback(self, instruction: str) -> str:
        with marking(CallKind.FINAL_ANSWER):
            return await super()._litellm_extract_text_fallback(instruction)

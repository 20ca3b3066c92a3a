"""``learn``'s evaluations and its SFT phase: the demonstrations (recorded, and drawn from them), SFT
probed by the policy's own sampled episodes, and what ends it."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import typer

from cua_stream.app.stack import Serving, engine_and_gateway, out
from cua_stream.config import BusConfig

if TYPE_CHECKING:
    from consumers.trainer.sft.demonstrations import Demonstrations, SftConfig
    from consumers.trainer.sft_run import EpochStats
    from cua_stream.app.evaluate.episodes import Evaluation
    from cua_stream.app.learn.plan import LearnPlan
    from cua_stream.evaluation.results import EvalResults


@dataclass(frozen=True)
class Evaluations:
    """``learn``'s evaluations: ``cua-stream eval``'s (``ev``) of whatever policy the gateway serves,
    under the run id ``eval-<run>-<name>``, written to ``home/<name>.json`` and published on the evals
    topic under the policy name ``name`` (base, sft, grpo, sft-e<epoch>)."""

    run: str
    home: Path
    ev: Evaluation

    async def of(self, name: str) -> EvalResults:
        from cua_stream.app.evaluate.episodes import evaluate, publish_report
        from cua_stream.evaluation.report import report_of
        from cua_stream.evaluation.results import save
        from cua_stream.identity import EVAL_RUN_PREFIX

        results = await evaluate(self.ev, f"{EVAL_RUN_PREFIX}{self.run}-{name}", name)
        save(self.home / f"{name}.json", results)
        await publish_report(self.ev.producer.bus, report_of(results))
        return results


def sft_end(plan: LearnPlan) -> str:
    ends = []
    if plan.sft_start_success:
        ends.append(
            f"until {plan.probe_episodes} sampled episodes on new layouts succeed {plan.sft_start_success:.0%} "
            f"of the time (probed {per_epoch(plan.probes_per_epoch)} from NLL {plan.sft_probe_nll:g})"
        )
    if plan.sft_target_nll:
        ends.append(f"until the demonstrations' token NLL is {plan.sft_target_nll:g}")
    return " or ".join(ends) + f", at most {plan.sft_epochs} epochs" if ends else f"{plan.sft_epochs} epochs"


class Prober:
    """Judges SFT's weights by the policy's own episodes: an engine and gateway (started at the first
    probe) load each probed epoch's weights, and an evaluation of ``plan.probe_episodes`` layouts per
    task runs as GRPO's episodes will (its sampling, layouts nobody trains or is measured on)."""

    def __init__(
        self,
        plan: LearnPlan,
        evals: Evaluations,
        base: Path,
        stack: ExitStack,
        *,
        engine_port: int,
        gateway_port: int,
        logs: Path,
    ) -> None:
        self.plan, self.evals, self.base, self.stack = plan, evals, base, stack
        self.ports, self.logs = (engine_port, gateway_port), logs
        self.serving: Serving | None = None
        self.history: list[dict[str, Any]] = []

    def __call__(self, weights: Path, epoch: EpochStats) -> bool:
        from cua_stream.app.learn.plan import overall

        if self.serving is None:
            self.serving = self.stack.enter_context(
                engine_and_gateway(
                    self.base,
                    self.evals.ev.producer.bus,
                    engine_port=self.ports[0],
                    gateway_port=self.ports[1],
                    logs=self.logs,
                )
            )
        results = anyio.run(self._evaluate, weights, len(self.history) + 1, f"sft-e{epoch.epoch:g}")
        s = overall(results)
        success = s.success_rate or 0.0  # nothing scored: no sign of a warm policy
        self.history.append(
            {
                "epoch": epoch.epoch,
                "nll": epoch.nll or 0.0,
                "success": success,
                "low": s.interval.low,
                "high": s.interval.high,
                "run_id": results.run_id,
            }
        )
        enough = self.plan.warm_enough(success)
        out.print(
            f"    epoch {epoch.epoch:g}: {success:.0%} of {s.scored} sampled episodes succeed "
            f"(95% CI {s.interval.low:.2f}-{s.interval.high:.2f})" + (" — GRPO starts here" if enough else "")
        )
        return enough

    async def _evaluate(self, weights: Path, version: int, name: str) -> EvalResults:
        import httpx

        from consumers.trainer.weights import push_weights

        assert self.serving is not None
        async with httpx.AsyncClient() as http:
            await push_weights(
                http,
                engine_url=self.serving.engine_url,
                gateway_url=self.serving.gateway_url,
                weights=weights,
                version=version,
            )
        return await self.evals.of(name)


def per_epoch(n: int) -> str:
    if n == 1:
        return "after each epoch"
    if n == 2:
        return "halfway through each epoch and after it"
    return f"{n} times an epoch"


def sft(plan: LearnPlan, bus: BusConfig, base: Path, home: Path, demo_run: str, prober: Prober) -> Path:
    from consumers.trainer.sft.demonstrations import SftConfig
    from consumers.trainer.sft_run import Probe, read_demonstrations, train

    config = SftConfig(
        run_ids=[demo_run],
        model_path=str(base),
        out_dir=str(home / "sft"),
        epochs=plan.sft_epochs,
        target_nll=plan.sft_target_nll,
        lr=plan.sft_lr,
        seed=plan.seed,
        drawn=plan.drawn_demos,
        drawn_seed=plan.drawn_layouts_from(),
        bus=bus,
    )
    demos = anyio.run(read_demonstrations, config)
    if not demos.samples:
        out.print("[red]no rewarded demonstration to train on[/red]")
        raise typer.Exit(1)
    if plan.drawn_demos:
        config, demos = _drawn_first(plan, config, demos, home)
    result = train(
        config,
        demos,
        on_epoch=lambda e: out.print(f"    {e.said()}"),
        probe=Probe(plan.sft_probe_nll, prober, plan.probes_per_epoch) if plan.sft_start_success else None,
    )
    ended = (
        "the start reached"
        if result.probed_enough
        else "the NLL floor reached"
        if result.reached_target
        else "the last epoch"
    )
    out.print(
        f"    demonstration token NLL {result.nll_before:.2f} -> {result.nll_after:.3f} after "
        f"{result.epochs[-1].epoch:g} epochs ({ended})"
    )
    return result.out


def _drawn_first(
    plan: LearnPlan, config: SftConfig, demos: Demonstrations, home: Path
) -> tuple[SftConfig, Demonstrations]:
    """``plan.drawn_epochs`` passes over the drawn first screens and the recorded samples, one a step; then
    the SFT proper's config (from those weights) and samples (the recorded ones: the drawn are first turns
    only, and among 1,200 of them the recorded demonstrations' later turns were lost)."""
    import dataclasses

    import msgspec

    from consumers.trainer.sft_run import train

    recorded = len(demos.samples) - demos.drawn
    if not demos.drawn:
        out.print("    [yellow]no first screen could be drawn (click-box's, with its target on it)[/yellow]")
        return config, demos
    out.print(
        f"    first {plan.drawn_epochs} epochs over {demos.drawn} first screens drawn from the {demos.episodes} "
        f"recorded demonstrations on new layouts, with their {recorded} samples, one a step"
    )
    drawn = msgspec.structs.replace(
        config,
        out_dir=str(home / "sft-drawn"),
        epochs=plan.drawn_epochs,
        target_nll=None,
        batch_size=plan.drawn_batch_size,
    )
    weights = train(drawn, demos, on_epoch=lambda e: out.print(f"    drawn {e.said(plan.drawn_epochs)}")).out
    out.print("    then SFT on the recorded demonstrations alone")
    recorded_only = dataclasses.replace(demos, samples=demos.samples[:recorded], drawn=0)
    return msgspec.structs.replace(config, model_path=str(weights)), recorded_only

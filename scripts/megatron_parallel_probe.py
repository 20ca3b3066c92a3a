"""Does megatron-bridge's Qwen3-VL run with TP / PP / DP > 1 over gloo on the CPU? A measurement, not a
trainer: run it with megatron-bridge's torchrun (``scripts/megatron-env.sh`` makes the venv)::

    torchrun --nproc_per_node 2 scripts/megatron_parallel_probe.py MODEL_DIR --tp 2 [--pp 1] [--out OUT.json]
        [--export] [--mutants] [--steps 2 --save WEIGHTS.safetensors]
    python scripts/megatron_parallel_probe.py MODEL_DIR --make-variant OUT_DIR --layers 4

Each stage prints ``probe <stage> ok <seconds>`` or ``probe <stage> failed <error>`` on rank 0: the
process groups, megatron's model-parallel groups, the model built and loaded (megatron-bridge's
``AutoBridge``), a forward over two text items and two with an image (vision tower included; each
data-parallel replica takes every other item), the token logprobs gathered over the vocabulary shards, the
backward, the replicas' gradients summed. ``--out``: the last stage's first rank writes the loss (minus
the mean token logprob over all items) and the gradient's global norm (each shard once), to compare with
one rank (``--nproc_per_node 1``). PP > 1: the stages built by megatron-bridge's provider, the hidden
states passed forward and their gradient back by hand (one microbatch; megatron-core's schedules allocate
on CUDA). ``--export``: the weights exported under their Hugging Face names (megatron-bridge's
``export_hf_weights``, gathering the TP shards and the PP stages), each tensor's digest in ``--out``.
``--grpo``: the loss is the trainer's GRPO loss (``consumers/trainer/grpo/loss.py``, with TIS and the KL
term), each item an episode. ``--steps N``: then N SGD steps on the same batch, the exported weights
after them in ``--save``. ``--mutants``: after the real run, the same run with one step broken (the
gradient norm without its all-reduce over the model-parallel group, the QK layernorms' gradients not summed
over the TP ranks, the replicas' gradients not summed, the first stage's vision input zeroed, the TP shards
exported in the wrong order), for a test to tell apart: one launch, not one each.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "consumers/trainer/backends/megatron"))

import torch
from megatron_cpu import import_bridge, use_local_modules


def items(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Two text items and two with a 4 x 4-patch image each (4 image tokens after the 2 x 2 merge), seeded;
    ordered so that two data-parallel ranks (every other item) each get one of each."""
    vision = config["vision_config"]
    g = torch.Generator().manual_seed(0)
    patch = vision["in_channels"] * vision["temporal_patch_size"] * vision["patch_size"] ** 2
    image = [config["vision_start_token_id"], *[config["image_token_id"]] * 4, config["vision_end_token_id"]]

    def text(n: int) -> dict[str, Any]:
        return {"tokens": torch.randint(100, 1000, (n,), generator=g)}

    def with_image() -> dict[str, Any]:
        return {
            "tokens": torch.tensor(
                [*torch.randint(100, 1000, (3,), generator=g).tolist(), *image, 14, 15, 16]
            ),
            "pixel_values": torch.randn(16, patch, generator=g),
            "image_grid_thw": torch.tensor([[1, 4, 4]]),
        }

    return [text(12), with_image(), with_image(), text(9)]


def make_variant(model_dir: str, out: str, layers: int) -> None:
    """The model of ``model_dir`` with ``layers`` language layers, seeded random weights (a PP probe needs
    the deepstack layers, 2 in the tiny model, on its first stage): its processor files copied."""
    import shutil

    from transformers import AutoConfig, Qwen3VLForConditionalGeneration

    Path(out).mkdir(parents=True, exist_ok=True)
    for f in Path(model_dir).iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name != "config.json":
            shutil.copy(f, Path(out) / f.name)
    config = AutoConfig.from_pretrained(model_dir)
    config.text_config.num_hidden_layers = layers
    torch.manual_seed(0)
    Qwen3VLForConditionalGeneration(config).save_pretrained(out)


def stage(name: str, rank: int, fn: Any) -> Any:
    start = time.perf_counter()
    try:
        out = fn()
    except Exception as e:
        if rank == 0:
            print(f"probe {name} failed {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()
        raise SystemExit(1) from None
    if rank == 0:
        print(f"probe {name} ok {time.perf_counter() - start:.2f}", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--out", default="")
    parser.add_argument("--export", action="store_true", help="export the weights, their digests in --out")
    parser.add_argument("--steps", type=int, default=0, help="then this many SGD steps on the same batch")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument(
        "--grpo", action="store_true", help="the trainer's GRPO loss (TIS, KL), not the mean token NLL"
    )
    parser.add_argument("--save", default="", help="the weights after --steps, as safetensors, here")
    parser.add_argument(
        "--mutants",
        action="store_true",
        help="after the real run, each step a parallel run needs broken in turn (its results in --out)",
    )
    parser.add_argument(
        "--make-variant", default="", help="write MODEL_DIR with --layers layers here, and stop"
    )
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    if args.make_variant:
        make_variant(args.model_dir, args.make_variant, args.layers)
        return 0
    import torch.distributed as dist
    from megatron.core import parallel_state, tensor_parallel

    torch.manual_seed(0)
    mutants: dict[str, dict[str, float]] = {}  # each broken step's loss and norm, when --mutants
    bridge_cls = import_bridge()
    use_local_modules(on_gpu=False)
    start = time.perf_counter()
    dist.init_process_group("gloo")  # rank, world size and rendezvous from torchrun's environment
    rank = dist.get_rank()
    if rank == 0:
        print(f"probe init_process_group ok {time.perf_counter() - start:.2f}", flush=True)
    stage(
        "initialize_model_parallel", rank, lambda: parallel_state.initialize_model_parallel(args.tp, args.pp)
    )

    def build() -> tuple[Any, Any]:
        bridge = bridge_cls.from_hf_pretrained(args.model_dir)
        provider = bridge.to_megatron_provider(load_weights=False)
        provider.tensor_model_parallel_size = args.tp
        provider.pipeline_model_parallel_size = args.pp
        provider.use_cpu_initialization = True
        provider.params_dtype = torch.float32
        provider.finalize()
        model = provider.provide(
            pre_process=parallel_state.is_pipeline_first_stage(),
            post_process=parallel_state.is_pipeline_last_stage(),
        )
        bridge.load_hf_weights([model])
        return bridge, model.float().eval()

    bridge, model = stage("build_and_load", rank, build)
    config = json.loads((Path(args.model_dir) / "config.json").read_text())
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "consumers/trainer/backends/megatron"))
    from worker import load_policy_loss, pack  # the worker's packing (THD, one segment per item), its loss

    dp = parallel_state.get_data_parallel_world_size()
    every = items(config)
    my_items = list(range(len(every)))[parallel_state.get_data_parallel_rank() :: dp]
    mine = [every[i] for i in my_items]  # this replica's share of the batch
    total = sum(int(item["tokens"].numel()) - 1 for item in every)  # tokens predicted, over all replicas
    batch = pack(mine)
    ids = batch["input_ids"]
    pixels = batch["pixel_values"]

    def forward() -> torch.Tensor:
        return model(
            input_ids=ids,
            position_ids=None,
            attention_mask=None,
            packed_seq_params=batch["packed_seq_params"],
            pixel_values=pixels,
            image_grid_thw=batch["image_grid_thw"],
        )

    def loss_of(logits: torch.Tensor) -> torch.Tensor:
        """Minus the summed logprob of each item's tokens after its first, over the batch's predicted
        tokens (all replicas'): summed over the replicas, the one-rank mean."""
        full = tensor_parallel.gather_from_tensor_model_parallel_region(logits)  # vocab shards joined
        rows = torch.log_softmax(full.reshape(ids.shape[1], -1).float(), dim=-1)
        picked, start = [], 0
        for length in batch["lengths"]:
            targets = ids[0, start + 1 : start + length]
            picked.append(rows[start : start + length - 1].gather(1, targets.unsqueeze(1)).squeeze(1))
            start += length
        if args.grpo:
            return grpo_loss(picked)
        return -torch.cat(picked).sum() / total

    policy_loss, loss_settings = None, None
    if args.grpo:  # the trainer's own loss module, loaded by file as the worker loads it
        loss_module = load_policy_loss()
        policy_loss = loss_module.policy_loss
        loss_settings = loss_module.LossConfig(tis_clip=2.0, kl_coef=0.1)
    held: dict[str, torch.Tensor] = {}  # the reference's and the engine's logprobs, made on the first pass

    def grpo_loss(picked: list[torch.Tensor]) -> torch.Tensor:
        """The GRPO loss with TIS and the KL term over this replica's episodes (one per item), scaled by
        its share of the episodes: the replicas' losses (and gradients) summed are the one-rank loss. The
        reference is the weights the run started from; the engine's logprobs are the reference's, each
        token moved by a seeded amount (so TIS has a ratio to cap)."""
        logprobs = torch.cat(picked)
        if not held:
            held["reference"] = logprobs.detach().clone()
            shifts = [torch.rand(len(x), generator=torch.Generator().manual_seed(100 + i)) for i, x in
                      zip(my_items, picked, strict=True)]  # fmt: skip
            held["rollout"] = held["reference"] - 0.5 + torch.cat(shifts)
        episodes = torch.cat([torch.full((len(x),), j) for j, x in enumerate(picked)])
        advantages = torch.cat(
            [torch.full((len(x),), ADVANTAGES[i]) for i, x in zip(my_items, picked, strict=True)]
        )
        loss, _ = policy_loss(logprobs, held["rollout"], advantages, torch.ones_like(logprobs), episodes,
                              loss_settings, reference_logprobs=held["reference"])  # fmt: skip
        return loss * len(my_items) / len(every)

    losses: list[torch.Tensor] = []
    first = parallel_state.is_pipeline_first_stage()
    last = parallel_state.is_pipeline_last_stage()

    def one_stage() -> None:  # the model called as the worker calls it
        loss = loss_of(forward())
        losses.append(loss.detach())
        loss.backward()

    def pipeline() -> None:
        # stages, one microbatch: megatron-core's schedules allocate on "cuda" (schedules.py:2292,
        # measured), so the hidden states go forward and their gradient back by gloo's send / recv here
        received = None
        if not first:
            dims = torch.zeros(3, dtype=torch.long)
            dist.recv(dims, src=parallel_state.get_pipeline_model_parallel_prev_rank())
            received = torch.zeros(*dims.tolist())
            dist.recv(received, src=parallel_state.get_pipeline_model_parallel_prev_rank())
            received.requires_grad_()
            model.set_input_tensor(received)
        out = forward()
        if last:
            loss = loss_of(out)
            losses.append(loss.detach())
            loss.backward()
        else:
            nxt = parallel_state.get_pipeline_model_parallel_next_rank()
            dist.send(torch.tensor(out.shape, dtype=torch.long), dst=nxt)
            dist.send(out.detach().contiguous(), dst=nxt)
            grad = torch.zeros_like(out)
            dist.recv(grad, src=nxt)
            out.backward(grad)
        if received is not None:
            dist.send(received.grad.contiguous(), dst=parallel_state.get_pipeline_model_parallel_prev_rank())

    forward_backward = one_stage if args.pp == 1 else pipeline
    stage("forward_backward", rank, forward_backward)

    def grad_norm(*, all_reduce: bool = True, qk_layernorms: bool = False) -> float:
        # megatron's get_grad_norm_fp32 makes its accumulator with torch.cuda (measured: "Found no NVIDIA
        # driver"); the same sum, on the CPU: each TP shard once, summed over the model-parallel group.
        # ``qk_layernorms``: theirs only.
        from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate

        square = torch.zeros(())
        for name, p in model.named_parameters():
            if qk_layernorms and not is_qk_layernorm(name):
                continue
            if p.grad is not None and param_is_not_tensor_parallel_duplicate(p):
                square += p.grad.float().pow(2).sum()
        if all_reduce:
            dist.all_reduce(square, group=parallel_state.get_model_parallel_group())
        return float(square.sqrt())

    def loss_value() -> float:
        return float(losses[0]) if losses else float("nan")

    if args.mutants and dp > 1:  # the replicas' gradients and losses as they are before they are summed
        mutants["no_dp_allreduce"] = {"loss": loss_value(), "grad_norm": grad_norm()}

    def sum_replicated_over_tensor_parallel() -> None:
        # megatron's finalize_model_grads (``_allreduce_non_tensor_model_parallel_grads``): the QK
        # layernorms are whole on every TP rank but each rank's heads give only part of their gradient;
        # summed over the TP group. Found missing by the steps' weights (one SGD step on, the loss 3.6e-5
        # off one rank's) where the first gradient norm had matched to 3e-6.
        grads = [
            p.grad for name, p in model.named_parameters() if p.grad is not None and is_qk_layernorm(name)
        ]
        for grad in grads:
            dist.all_reduce(grad, group=parallel_state.get_tensor_model_parallel_group())

    if args.mutants and args.tp > 1:  # rank 0's heads' share of the QK layernorms' gradient only
        mutants["layernorms_not_summed"] = {"qk_layernorm_grad_norm": grad_norm(qk_layernorms=True)}
    if args.tp > 1:
        stage("tensor_parallel_layernorm_sum", rank, sum_replicated_over_tensor_parallel)

    def reduce_over_replicas() -> None:
        # what megatron's DistributedDataParallel does with its grad buffers: the replicas' gradients
        # summed (the loss is already divided by the whole batch's tokens)
        group = parallel_state.get_data_parallel_group()
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad, group=group)
        if losses:
            dist.all_reduce(losses[0], group=group)

    if dp > 1:
        stage("data_parallel_all_reduce", rank, reduce_over_replicas)
    reporting = (
        last
        and parallel_state.get_tensor_model_parallel_rank() == 0
        and parallel_state.get_data_parallel_rank() == 0
    )

    norm = stage("grad_norm", rank, grad_norm)
    result: dict[str, Any] = {"loss": loss_value(), "grad_norm": norm, "tp": args.tp, "pp": args.pp, "dp": dp}
    result["qk_layernorm_grad_norm"] = grad_norm(qk_layernorms=True)
    if args.mutants and args.tp * args.pp > 1:  # each rank's own shards' norm, not the model's
        mutants["no_grad_allreduce"] = {"loss": loss_value(), "grad_norm": grad_norm(all_reduce=False)}
    if args.mutants and args.pp > 1:  # again, the first stage's vision input zeroed
        model.zero_grad(set_to_none=True)
        losses.clear()
        real, pixels = pixels, torch.zeros_like(pixels) if first else pixels
        stage("pipeline_without_vision", rank, pipeline)
        mutants["drop_vision"] = {"loss": loss_value(), "grad_norm": grad_norm()}
        pixels = real
    if args.export:
        result["export"] = stage("export", rank, lambda: exported(bridge, model))

    def sgd_steps() -> list[float]:
        # plain SGD: an update elementwise on each shard, so what is compared is the gradient each rank
        # holds after the split, the all-reduces and the replicas' sum, step after step
        step_losses = []
        for _ in range(args.steps):
            model.zero_grad(set_to_none=True)
            losses.clear()
            forward_backward()
            if args.tp > 1:
                sum_replicated_over_tensor_parallel()
            if dp > 1:
                reduce_over_replicas()
            with torch.no_grad():
                for p in model.parameters():
                    if p.grad is not None:
                        p.add_(p.grad, alpha=-args.lr)
            step_losses.append(loss_value())
        return step_losses

    if args.steps:
        result["step_losses"] = stage("sgd_steps", rank, sgd_steps)
        weights = dict(bridge.export_hf_weights([model], cpu=True, show_progress=False))  # every rank
        if reporting and args.save:
            from safetensors.torch import save_file

            save_file({k: v.contiguous() for k, v in weights.items()}, args.save)
    if args.export and args.mutants and args.tp > 1:  # each rank holds its neighbour's shard: an export
        # that gathers the shards out of order
        stage("swap_shards", rank, lambda: swap_tensor_parallel_shards(model))
        mutants["shards_swapped"] = {"export": exported(bridge, model)}
    result["mutants"] = mutants
    if reporting:  # the one rank that reports
        print(f"probe result rank {rank} loss {result['loss']:.8f} grad_norm {norm:.8f}", flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(result))
    dist.destroy_process_group()
    return 0


ADVANTAGES = (1.0, -0.5, 0.5, -1.0)
"""Each item's (episode's) advantage under ``--grpo``."""


def is_qk_layernorm(name: str) -> bool:
    """Whether ``name`` is a QK layernorm's parameter (Qwen3's per-head query and key norms)."""
    return "q_layernorm" in name or "k_layernorm" in name


def exported(bridge: Any, model: Any) -> dict[str, str]:
    """Each weight megatron-bridge exports (every rank takes part: the shards are gathered), by its Hugging
    Face name: its dtype, shape and bytes' digest."""
    digests = {}
    for name, tensor in bridge.export_hf_weights([model], cpu=True, show_progress=False):
        t = tensor.detach().contiguous()
        raw = t.view(torch.uint8) if t.dtype != torch.uint8 else t
        digests[name] = f"{t.dtype} {list(t.shape)} {hashlib.sha256(raw.numpy().tobytes()).hexdigest()}"
    return digests


def swap_tensor_parallel_shards(model: Any) -> None:
    """Each tensor-parallel weight replaced by the next TP rank's shard (ranks' order rotated): what an
    export that gathers the shards in the wrong order would write."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    group = parallel_state.get_tensor_model_parallel_group()
    size = parallel_state.get_tensor_model_parallel_world_size()
    me = parallel_state.get_tensor_model_parallel_rank()
    with torch.no_grad():
        for p in model.parameters():
            if getattr(p, "tensor_model_parallel", False):
                shards = [torch.empty_like(p) for _ in range(size)]
                dist.all_gather(shards, p.data.contiguous(), group=group)
                p.data.copy_(shards[(me + 1) % size])


if __name__ == "__main__":
    sys.exit(main())

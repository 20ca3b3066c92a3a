"""Qwen3-VL through megatron-bridge: packed next-token logprobs. Runs in megatron-bridge's venv
(``scripts/megatron-env.sh``), never in cua-stream's: torch, transformers and megatron only, nothing of
cua_stream's (megatron-bridge pins a transformers that cua-stream's venv cannot hold). Started by its file
(this package's ``__init__`` says why), found with ``consumers.trainer.backends.megatron.worker_file()``:

    python worker.py MODEL_DIR IN.pt OUT.pt [IN2.pt OUT2.pt ...]
    python worker.py --check-imports
    python worker.py --serve      (persistent: see ``serve``; the model and AdamW live across steps)

``MODEL_DIR``: a Hugging Face Qwen3-VL checkpoint, converted by megatron-bridge's ``AutoBridge`` (its
Qwen3-VL provider and weight mappings). ``IN.pt`` (``torch.save``): ``{"temperature": float, "items":
[{"tokens": LongTensor[L], "pixel_values": Tensor | None, "image_grid_thw": LongTensor[n, 3] | None}]}``.
The items go end to end in one THD-packed sequence (megatron's ``PackedSeqParams``: each item attends to
its own tokens only, its M-RoPE positions restart, its images are its own). ``OUT.pt``: ``{"logprobs":
[Tensor[L]]}``, per item the logprob of each token given the tokens before it (at the temperature), 0.0
at its first token (nothing predicts it), the convention of cua-stream's torch backend.

With ``"loss": {LossConfig's fields}`` in the request and, per item, ``"rollout_logprobs"``,
``"loss_mask"`` (per token), ``"advantage"`` and ``"episode"``, the forward keeps its graph and the
project's own ``policy_loss`` (``consumers/trainer/grpo/loss.py``, loaded from its file: torch only) is
applied to the packed logprobs and differentiated; ``OUT.pt`` adds ``"loss"``, ``"stats"`` (LossStats'
fields), ``"grad_norm"`` (every parameter's gradient, unclipped) and ``"grads"``: the gradient of each
checkpoint weight, by its Hugging Face name, mapped back through megatron-bridge's own export
(``export_hf_weights`` applied to the gradients: fused QKV and gate/up split as the weights are). No
optimizer step is taken.

The worker runs on the CPU, in float32, with megatron-core's own modules where megatron-bridge 0.6.2
hard-codes Transformer Engine ones (``use_local_modules``; TE's torch extension builds only with CUDA), plus
the one thing those lack, packed (THD) attention. With ``"device": "cuda"`` in ``init`` (the persistent
worker) the model runs on the GPU in bfloat16, as Megatron trains: bf16 weights for the forward and
backward, AdamW over float32 master copies of them (a 1e-5 step is below bf16's resolution of a weight),
the bf16 weights copied from the masters after each step. Still without TE's fused modules and with one
process (no NCCL: world size 1): ``scripts/megatron_gpu_probe.py`` measures this path on a GPU.
"""

from __future__ import annotations

import socket
import sys
import warnings
from typing import Any

import torch

warnings.filterwarnings("ignore")  # megatron warns at import that Apex / TE / fused kernels are missing

from megatron_cpu import import_bridge, use_local_modules  # noqa: E402  (this file's folder, run by its file)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load_model(model_dir: str, device: str = "cpu", dtype: torch.dtype | None = None) -> tuple[Any, Any]:
    """The bridge and the checkpoint as megatron-bridge's Qwen3-VL model on ``device`` (world size 1,
    TP = PP = 1), in eval mode (no dropout; the gradient still flows). ``dtype``: its weights', by default
    float32 on the CPU, bfloat16 on a GPU."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    on_gpu = torch.device(device).type == "cuda"
    dtype = dtype or (torch.bfloat16 if on_gpu else torch.float32)
    bridge_cls = import_bridge()
    use_local_modules(on_gpu)
    if on_gpu:
        torch.cuda.set_device(torch.device(device).index or 0)
    if not dist.is_initialized():  # a port of its own: a MASTER_PORT inherited from a parent may be held
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)
    if on_gpu:  # megatron's CUDA RNG streams, seeded as its init seeds them (once the groups exist)
        from megatron.core import tensor_parallel

        tensor_parallel.model_parallel_cuda_manual_seed(0)
    bridge = bridge_cls.from_hf_pretrained(model_dir)
    provider = bridge.to_megatron_provider(load_weights=False)
    provider.use_cpu_initialization = True  # built on the CPU, moved once loaded
    provider.params_dtype = dtype
    provider.bf16 = dtype == torch.bfloat16
    provider.finalize()
    model = provider.provide(pre_process=True, post_process=True)  # one stage: it embeds and projects
    bridge.load_hf_weights([model])
    # The whole model in ``dtype``, buffers too, as megatron's Float16Module casts it: the provider's
    # params_dtype reaches the language model only (the vision tower's config is made apart).
    return bridge, model.to(device, dtype).eval()


def pack(
    items: list[dict[str, Any]], device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> dict[str, Any]:
    """The items end to end: tokens (1, T), their cu_seqlens, and the images in item order (their pixels
    in the weights' ``dtype``), all on ``device``."""
    from megatron.core.packed_seq_params import PackedSeqParams

    lengths = [int(item["tokens"].numel()) for item in items]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    pixels = [item["pixel_values"] for item in items if item.get("pixel_values") is not None]
    grids = [item["image_grid_thw"] for item in items if item.get("image_grid_thw") is not None]
    return {
        "input_ids": torch.cat([item["tokens"].long() for item in items]).unsqueeze(0).to(device),
        "packed_seq_params": PackedSeqParams(
            qkv_format="thd",
            cu_seqlens_q=cu,
            cu_seqlens_kv=cu,
            max_seqlen_q=max(lengths),
            max_seqlen_kv=max(lengths),
        ),
        "pixel_values": torch.cat(pixels).to(device, dtype) if pixels else None,
        "image_grid_thw": torch.cat(grids).long().to(device) if grids else None,
        "lengths": lengths,
    }


def packed_logprobs(model: Any, items: list[dict[str, Any]], temperature: float = 1.0) -> list[torch.Tensor]:
    """Per item, the logprob of each of its tokens (0.0 at its first), from one packed forward pass, on
    the model's device."""
    weight = next(model.parameters())
    batch = pack(items, weight.device, weight.dtype)
    ids = batch["input_ids"]
    logits = model(
        input_ids=ids,
        position_ids=None,  # the model computes M-RoPE per packed sample from the tokens and grids
        attention_mask=None,
        packed_seq_params=batch["packed_seq_params"],
        pixel_values=batch["pixel_values"],
        image_grid_thw=batch["image_grid_thw"],
    )
    logits = logits.reshape(ids.shape[1], -1).float()  # (T, padded vocab)
    out, start = [], 0
    for length in batch["lengths"]:
        rows = logits[start : start + length - 1] / temperature  # row i predicts token i + 1
        targets = ids[0, start + 1 : start + length]
        picked = torch.log_softmax(rows, dim=-1).gather(1, targets.unsqueeze(1)).squeeze(1)
        out.append(torch.cat([picked.new_zeros(1), picked]))
        start += length
    return out


def load_policy_loss() -> Any:
    """The project's loss module from its file, not a copy: one definition. It imports torch and its
    settings' module (``loss_config.py``, the standard library only), which is loaded first, from its file,
    under the name the loss imports it by: this venv has no cua-stream, and the directory cua-stream is
    installed in holds cua-stream's own transformers, so neither is put on the path."""
    from pathlib import Path

    grpo = Path(__file__).resolve().parents[2] / "grpo"  # consumers/trainer/grpo/
    _module_from_file("consumers.trainer.grpo.loss_config", grpo / "loss_config.py")
    return _module_from_file("cua_trainer_loss", grpo / "loss.py")


def _module_from_file(name: str, path: Any) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def hf_gradients(bridge: Any, model: Any) -> dict[str, torch.Tensor]:
    """Each parameter's gradient under its Hugging Face name: the bridge's weight export, run with every
    parameter's data swapped for its gradient (0 where it has none), then swapped back."""
    params = list(model.parameters())
    saved = [p.data for p in params]
    try:
        for p in params:
            p.data = p.grad.detach() if p.grad is not None else torch.zeros_like(p.data)
        return {
            name: tensor.detach().clone()
            for name, tensor in bridge.export_hf_weights([model], cpu=True, show_progress=False)
        }
    finally:
        for p, data in zip(params, saved, strict=True):
            p.data = data


def packed_loss(
    loss_module: Any,
    logprobs: torch.Tensor,
    items: list[dict[str, Any]],
    config: Any,
    reference: torch.Tensor | None = None,
    old: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Any]:
    """The project's ``policy_loss`` over the items' packed logprobs (their per-token inputs packed alike)."""

    def per_token(key: str, dtype: torch.dtype) -> torch.Tensor:
        return torch.cat([torch.as_tensor(item[key], dtype=dtype) for item in items]).to(logprobs.device)

    def per_item(key: str, dtype: torch.dtype) -> torch.Tensor:
        return torch.cat(
            [torch.full((int(item["tokens"].numel()),), item[key], dtype=dtype) for item in items]
        ).to(logprobs.device)

    return loss_module.policy_loss(
        logprobs,
        per_token("rollout_logprobs", torch.float32),
        per_item("advantage", torch.float32),
        per_token("loss_mask", torch.uint8),
        per_item("episode", torch.long),
        config,
        reference,
        old,
    )


def loss_and_gradient(bridge: Any, model: Any, request: dict[str, Any]) -> dict[str, Any]:
    """The packed GRPO loss of the request's items and its gradient (no optimizer step)."""
    import dataclasses

    loss_module = load_policy_loss()
    items = request["items"]
    logprobs = torch.cat(packed_logprobs(model, items, float(request.get("temperature", 1.0))))
    model.zero_grad(set_to_none=True)
    loss, stats = packed_loss(loss_module, logprobs, items, loss_module.LossConfig(**request["loss"]))
    loss.backward()
    grads = [p.grad.detach().flatten() for p in model.parameters() if p.grad is not None]
    return {
        "loss": float(loss.detach()),
        "stats": dataclasses.asdict(stats),
        "grad_norm": float(torch.cat(grads).norm()),
        "grads": hf_gradients(bridge, model),
    }


class Trainer:
    """The persistent worker's state: the model, its AdamW and the step semantics of cua-stream's torch
    backend (``consumers/trainer/backends/torch_backend.py``), over megatron's parameters. AdamW and the
    global-norm clip are element-wise and norm-wise, so megatron's fused QKV and gate/up hold the same numbers
    and get the same update as the Hugging Face weights they export to. Whether a step carries a reward signal
    (``groups.carries_signal``) is decided by the caller, which can import cua_stream: ``rewarded``."""

    def __init__(self, init: dict[str, Any]) -> None:
        self.loss_module = load_policy_loss()
        self.config = self.loss_module.LossConfig(**init.get("loss", {}))
        self.temperature = float(init.get("temperature", 1.0))
        self.max_grad_norm = float(init.get("max_grad_norm", 1.0))
        self.passes = int(init.get("passes", 1))
        self.model_dir = str(init["model_dir"])
        device = str(init.get("device", "cpu"))
        dtype = (
            getattr(torch, init["dtype"]) if init.get("dtype") else None
        )  # "bfloat16": the device's default
        self.bridge, self.model = load_model(str(init.get("weights") or self.model_dir), device, dtype)
        self.reference = None
        if self.config.kl_coef:  # the run's start, frozen, whatever checkpoint ``weights`` resumes
            _, self.reference = load_model(self.model_dir, device, dtype)
            self.reference.requires_grad_(False)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        # What AdamW updates: the weights themselves in float32, else float32 masters of them.
        self.masters = [p if p.dtype == torch.float32 else p.detach().float().clone() for p in self.params]
        self.optimizer = torch.optim.AdamW(self.masters, lr=float(init.get("lr", 1e-5)))

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self, items: list[dict[str, Any]], rewarded: bool) -> dict[str, Any]:
        """``passes`` updates over ``items``, the old logprobs of every pass after the first being the
        first's (the ratio clip and TIS bound the drift); none past the first when nothing carries a signal.
        The statistics are the first pass's, with the last pass's clip fraction."""
        reference = None
        if self.reference is not None:
            with torch.no_grad():
                reference = torch.cat(packed_logprobs(self.reference, items, self.temperature))
        first, old = self.update(items, rewarded, reference, None)
        last = first
        if not (rewarded or self.reference is not None):
            return first
        for _ in range(self.passes - 1):
            last, _ = self.update(items, rewarded, reference, old)
        first["stats"]["clip_fraction"] = last["stats"]["clip_fraction"]
        return first

    def update(
        self,
        items: list[dict[str, Any]],
        rewarded: bool,
        reference: torch.Tensor | None,
        old: torch.Tensor | None,
    ) -> tuple[dict[str, Any], torch.Tensor]:
        import dataclasses

        self.optimizer.zero_grad(set_to_none=True)
        self.model.zero_grad(set_to_none=True)  # the bf16 weights' own, apart from their masters'
        signal = rewarded or self.reference is not None  # with a KL its anchor is a signal too
        with torch.set_grad_enabled(signal):
            logprobs = torch.cat(packed_logprobs(self.model, items, self.temperature))
            loss, stats = packed_loss(self.loss_module, logprobs, items, self.config, reference, old)
        out: dict[str, Any] = {"stats": dataclasses.asdict(stats), "grad_norm": 0.0}
        if signal:
            loss.backward()
            for master, param in zip(self.masters, self.params, strict=True):
                if master is not param:
                    master.grad = None if param.grad is None else param.grad.float()
            out["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.masters, self.max_grad_norm))
            if not rewarded:
                self.forget_momentum()
            self.optimizer.step()
            with torch.no_grad():
                for master, param in zip(self.masters, self.params, strict=True):
                    if master is not param:
                        param.copy_(master)
        return out, logprobs.detach()

    def forget_momentum(self) -> None:
        """As the torch backend's: a step whose only gradient is the KL's follows it, not the last
        rewarded update's momentum (see ``TorchBackend._forget_momentum`` for the measurement)."""
        for state in self.optimizer.state.values():
            if "exp_avg" in state:
                state["exp_avg"].zero_()

    def save(self, out_dir: str, processor: bool) -> str:
        """The weights under their Hugging Face names (megatron-bridge's export) as ``model.safetensors``,
        with the checkpoint's config (and, with ``processor``, its tokenizer and image processor files):
        a directory the engine loads as it loads the torch backend's."""
        import shutil
        from pathlib import Path

        from safetensors.torch import save_file

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        weights = {  # in the weights' own dtype: bf16 from a GPU (what the forward used; half float32's bytes)
            name: tensor.detach().contiguous().clone()
            for name, tensor in self.bridge.export_hf_weights([self.model], cpu=True, show_progress=False)
        }
        save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
        for src in Path(self.model_dir).iterdir():
            weights_file = src.suffix in (".safetensors", ".bin") or src.name.endswith(".index.json")
            keep = src.name in ("config.json", "generation_config.json") or processor
            if src.is_file() and keep and not weights_file:
                shutil.copyfile(src, out / src.name)
        return str(out)

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        if op == "set_lr":
            self.set_lr(float(request["lr"]))
            return {}
        if op == "step":
            return self.step(request["items"], bool(request["rewarded"]))
        if op == "save":
            return {"dir": self.save(str(request["dir"]), bool(request.get("processor", False)))}
        if op == "logprobs":
            with torch.no_grad():
                logprobs = packed_logprobs(self.model, request["items"], self.temperature)
                return {"logprobs": [row.cpu() for row in logprobs]}
        if op == "optimizer_state":
            return {"state": self.optimizer.state_dict()}
        if op == "load_optimizer_state":
            self.optimizer.load_state_dict(request["state"])
            return {}
        raise ValueError(f"unknown op {op!r}")


DONE = "megatron-worker-done"
FAILED = "megatron-worker-failed"


def serve(stdin: Any, stdout: Any) -> int:
    """One request per stdin line, ``IN.pt OUT.pt``: ``IN.pt`` a ``torch.save``d dict with ``"op"`` (the
    first ``"init"``), the answer ``torch.save``d to ``OUT.pt``, then one stdout line ``DONE OUT.pt`` (or
    ``FAILED message``: the worker stays up). The model and its optimizer live across requests. Other
    stdout lines (megatron's prints) are not answers: the caller skips them. EOF ends it."""
    import traceback

    trainer: Trainer | None = None
    for line in stdin:
        if not line.strip():
            continue
        src, dst = line.split()
        try:
            request = torch.load(src, weights_only=False)
            if request["op"] == "init":
                trainer = Trainer(request)
                answer: dict[str, Any] = {}
            elif trainer is None:
                raise RuntimeError("the first request must be init")
            else:
                answer = trainer.handle(request)
            torch.save(answer, dst)
            print(f"{DONE} {dst}", file=stdout, flush=True)
        except Exception as error:  # the caller gets it on its line; the traceback goes to stderr
            traceback.print_exc()
            message = f"{type(error).__name__}: {error}".replace("\n", " ")
            print(f"{FAILED} {message}", file=stdout, flush=True)
    return 0


def main(argv: list[str]) -> int:
    if argv == ["--serve"]:
        return serve(sys.stdin, sys.stdout)
    if argv == ["--check-imports"]:
        import_bridge()
        import megatron.bridge.models.qwen_vl.qwen3_vl_provider  # noqa: F401

        return 0
    if len(argv) < 3 or len(argv) % 2 == 0:
        print(__doc__, file=sys.stderr)
        return 2
    model_dir, pairs = argv[0], argv[1:]
    bridge, model = load_model(model_dir)  # once for every request: building it is most of a request's time
    for src, dst in zip(pairs[::2], pairs[1::2], strict=True):
        request = torch.load(src, weights_only=True)
        with torch.no_grad():
            out: dict[str, Any] = {
                "logprobs": packed_logprobs(model, request["items"], float(request.get("temperature", 1.0)))
            }
        if "loss" in request:
            out |= loss_and_gradient(bridge, model, request)  # zeroes the gradients first
        torch.save(out, dst)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

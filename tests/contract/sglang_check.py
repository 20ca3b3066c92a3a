"""cua-stream's engine traffic judged by SGLang 0.5.23's own code. Runs in SGLang's venv
(``scripts/sglang-env.sh``), never in cua-stream's: the standard library and the installed ``sglang``
package only, so nothing of cua-stream's can vouch for itself.

    python sglang_check.py CAPTURE.json [--vocab-size N] [--tokenizer MODEL_DIR]

CAPTURE is ``{"requests": [...], "responses": [...], "reads": [...]}`` (a bare list is ``requests``):

- ``requests``: ``{"name", "method", "path", "body"}`` as the project sent them. Each is parsed the way
  SGLang's HTTP server parses that route: the route and its request class are read from SGLang's
  ``http_server.py`` (not from a table here); the body is validated into that class as FastAPI does
  (pydantic); ``/generate`` then passes SGLang's JSON contract gate, ``normalize_batch_and_arguments``,
  ``SamplingParams(**sampling_params)`` with ``normalize``/``verify``, the scheduler's
  ``logprob_start_len`` bound, and ``load_image`` for each image. A key SGLang would silently drop (not a
  field of the class) is a failure: the project meant something by it that SGLang never sees.
- ``responses``: ``{"name", "path", "body"}`` answered by an engine that claims SGLang's shapes (the
  reference engine). Every key in them must be one SGLang writes for that route; ``/generate`` replies
  are also decoded with SGLang's response contract (``sglang.api.v1.api_types.GenerateResponse``).
- ``reads``: ``{"path", "key"}``, the dotted keys the project reads from replies (``meta_info.
  finish_reason.status_code``); each must be one SGLang writes.

"Keys SGLang writes" come from SGLang's code: its finish reasons' ``to_json`` and
``add_weight_versions_to_meta_info`` are called; ``meta_info``'s other keys and the other routes' keys
are read from the dict literals in ``tokenizer_manager.py`` and in each route's handler (file:line in
each verdict). Prints a JSON verdict per item; exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import json
import sys
import warnings
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore", category=UserWarning)  # "Only CUDA ... support AWQ" on import, on a CPU

import msgspec  # noqa: E402
import pydantic  # noqa: E402
import sglang  # noqa: E402

SGLANG = Path(sglang.__file__).parent
HTTP_SERVER = SGLANG / "srt/entrypoints/http_server.py"
TOKENIZER_MANAGER = SGLANG / "srt/managers/tokenizer_manager.py"
SCHEDULER = SGLANG / "srt/managers/scheduler.py"


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(SGLANG.parent)}:{line}"


# ---- SGLang's routes, from its http_server.py ----


@dataclass
class Route:
    path: str
    methods: set[str]
    handler: ast.AsyncFunctionDef | ast.FunctionDef
    body_class: str | None
    """The name of the request class its body is parsed into (None: it takes no body)."""

    @property
    def where(self) -> str:
        return where(HTTP_SERVER, self.handler.lineno)


def _literal_path(call: ast.Call) -> str | None:
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return None


def _methods(call: ast.Call) -> set[str]:
    verb = call.func.attr if isinstance(call.func, ast.Attribute) else ""
    if verb != "api_route":
        return {verb.upper()}
    for kw in call.keywords:
        if kw.arg == "methods" and isinstance(kw.value, (ast.List, ast.Tuple)):
            return {e.value for e in kw.value.elts if isinstance(e, ast.Constant)}
    return {"GET"}


def _body_class(fn: ast.AsyncFunctionDef | ast.FunctionDef) -> str | None:
    """The class of the handler's body parameter: ``obj: X`` or ``obj: Annotated[X, Body()]``."""
    for arg in fn.args.args:
        ann = arg.annotation
        if isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == "Annotated":
            first = ann.slice.elts[0] if isinstance(ann.slice, ast.Tuple) else ann.slice
            return first.id if isinstance(first, ast.Name) else None
        if isinstance(ann, ast.Name) and ann.id not in ("Request", "str", "int", "float", "bool"):
            return ann.id
    return None


def _load_routes() -> tuple[dict[str, Route], dict[str, str], dict[str, ast.AST]]:
    """SGLang's routes by path, the modules its names are imported from, and its module functions."""
    tree = ast.parse(HTTP_SERVER.read_text())
    routes: dict[str, Route] = {}
    imported: dict[str, str] = {}
    functions: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                imported[alias.asname or alias.name] = node.module
        if not isinstance(node, (ast.AsyncFunctionDef, ast.FunctionDef)):
            continue
        functions[node.name] = node
        for deco in node.decorator_list:
            if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)):
                continue
            if isinstance(deco.func.value, ast.Name) and deco.func.value.id == "app":
                path = _literal_path(deco)
                if path is not None:
                    routes[path] = Route(path, _methods(deco), node, _body_class(node))
    return routes, imported, functions


ROUTES, IMPORTED, FUNCTIONS = _load_routes()


def request_class(route: Route) -> type:
    assert route.body_class is not None
    return getattr(importlib.import_module(IMPORTED[route.body_class]), route.body_class)


def field_names(cls: type) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return {f.name for f in msgspec.structs.fields(cls)}


# ---- requests ----


def check_request(item: dict[str, Any], vocab_size: int | None, tokenizer: Any) -> list[str]:
    path, method, body = item["path"], item.get("method", "POST").upper(), item.get("body")
    route = ROUTES.get(path)
    if route is None:
        return [f"SGLang {version('sglang')} has no route {path} ({HTTP_SERVER.name})"]
    if method not in route.methods:
        return [f"{path} takes {sorted(route.methods)}, not {method} ({route.where})"]
    if route.body_class is None:
        return [f"{path} takes no body, but one was sent ({route.where})"] if body else []
    cls = request_class(route)
    if not isinstance(body, dict):
        return [f"body must be a JSON object for {cls.__name__} ({route.where})"]
    problems = [
        f"{key!r} is not a field of {cls.__name__}: SGLang drops it ({route.where})"
        for key in sorted(set(body) - field_names(cls))
    ]
    try:  # what FastAPI does with the route's body parameter
        obj = pydantic.TypeAdapter(cls).validate_python(body)
    except pydantic.ValidationError as e:
        return [*problems, *(f"{cls.__name__}: {_loc(err['loc'])}: {err['msg']}" for err in _body_errors(e))]
    except (TypeError, ValueError) as e:  # the class's own __post_init__
        return [*problems, f"{cls.__name__}: {type(e).__name__}: {e}"]
    if path == "/generate":
        problems += _check_generate(obj, body, vocab_size, tokenizer)
    return problems


def _body_errors(error: pydantic.ValidationError) -> list[Any]:
    """The errors about the body: SGLang's struct schema is a union of "already an instance" (never, from
    JSON) and "a dict made into one", whose errors are the ones that say what is wrong."""
    errors = [e for e in error.errors() if not str(e["loc"][:1]).startswith("('is-instance")]
    return errors or error.errors()


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc if not str(p).startswith("function-after")) or "body"


def _check_generate(obj: Any, body: dict[str, Any], vocab_size: int | None, tokenizer: Any) -> list[str]:
    from sglang.srt.entrypoints.api_contract import generate_contract_error
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.utils.common import load_image

    problems = []
    if (error := generate_contract_error(body)) is not None:  # the route answers 400 {"error": ...}
        problems.append(f"contract gate (api_contract.generate_contract_error): {error}")
    try:
        obj.normalize_batch_and_arguments()
    except (ValueError, TypeError) as e:
        return [*problems, f"GenerateReqInput.normalize_batch_and_arguments: {e}"]
    try:
        params = SamplingParams(**(obj.sampling_params or {}))
        params.normalize(tokenizer)  # None: as a server started with skip_tokenizer_init
        if vocab_size is not None:
            params.verify(vocab_size)
    except (TypeError, ValueError) as e:
        problems.append(f"SamplingParams: {type(e).__name__}: {e}")
    start = obj.logprob_start_len
    if isinstance(start, int) and isinstance(obj.input_ids, list) and start > len(obj.input_ids):
        problems.append(
            f"logprob_start_len={start} is past the {len(obj.input_ids)} input tokens "
            f"(the scheduler refuses it, {_line_of(SCHEDULER, 'is higher than the number of input tokens')})"
        )
    images = obj.image_data if isinstance(obj.image_data, list) else [obj.image_data]
    for i, image in enumerate(i for i in images if i is not None):
        try:
            load_image(image, gpu_image_decode=False)
        except Exception as e:  # whatever SGLang's loader raises is a refusal of this image
            problems.append(f"image_data[{i}]: load_image: {type(e).__name__}: {e}")
    return problems


def _line_of(path: Path, text: str) -> str:
    return _find(path, text) or path.name


def _find(path: Path, text: str) -> str | None:
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if text in line:
            return where(path, n)
    return None


# ---- the keys SGLang writes ----


@dataclass
class Key:
    where: str
    children: dict[str, Key] = field(default_factory=dict)
    """Keys inside this one's value (an object, or each object of a list)."""


def _dict_keys(node: ast.AST, path: Path) -> dict[str, Key]:
    """The string keys of every dict literal under ``node``."""
    found: dict[str, Key] = {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Dict):
            for k in sub.keys:
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    found.setdefault(k.value, Key(where(path, k.lineno)))
    return found


def _keys_written_to(name: str, path: Path) -> dict[str, Key]:
    """Keys a module writes into a dict variable ``name``: its dict literal, ``name[k] = ...``,
    ``name.update({...})`` and ``name.setdefault(k, ...)``."""
    found: dict[str, Key] = {}

    def add(node: ast.AST) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.setdefault(node.value, Key(where(path, node.lineno)))

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                for k in node.value.keys:
                    if k is not None:
                        add(k)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == name:
                add(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value
            if isinstance(target, ast.Name) and target.id == name and node.args:
                if node.func.attr == "update" and isinstance(node.args[0], ast.Dict):
                    for k in node.args[0].keys:
                        if k is not None:
                            add(k)
                elif node.func.attr == "setdefault":
                    add(node.args[0])
    return found


def _called(obj: Any, built: dict[str, Any]) -> dict[str, Key]:
    """The keys of ``built``, a value SGLang's own ``obj`` produced."""
    file, line = inspect.getsourcefile(obj), inspect.getsourcelines(obj)[1]
    here = where(Path(file), line) if file else repr(obj)
    return {k: Key(here) for k in built}


def generate_keys() -> dict[str, Key]:
    """The keys of a ``/generate`` reply as SGLang 0.5.23 writes them."""
    from sglang.srt.managers import schedule_batch as sb
    from sglang.srt.utils import weight_versions as wv

    meta = _keys_written_to("meta_info", TOKENIZER_MANAGER)
    spans = [
        wv.WeightVersionSpan(version="1", start=0, end=2),
        wv.WeightVersionSpan(version="2", start=2, end=3),
    ]
    built: dict[str, Any] = {}
    wv.add_weight_versions_to_meta_info(built, spans, num_output_tokens=3)
    meta.update(_called(wv.add_weight_versions_to_meta_info, built))
    meta["weight_versions"].children = _called(
        wv.add_weight_versions_to_meta_info, built["weight_versions"][0]
    )
    finish: dict[str, Key] = {}
    for reason in (
        sb.FINISH_MATCHED_TOKEN(matched=2),
        sb.FINISH_MATCHED_STR(matched="."),
        sb.FINISH_LENGTH(length=3),
        sb.FINISH_ABORT(message="m", status_code=400, err_type="e"),
    ):
        for k, key in _called(type(reason).to_json, reason.to_json()).items():
            finish.setdefault(k, key)
    meta["finish_reason"].children = finish
    top = {k: v for k, v in _keys_of_dicts_with(TOKENIZER_MANAGER, "meta_info").items()}
    top["meta_info"] = Key(top["meta_info"].where, meta)
    return top


def _keys_of_dicts_with(path: Path, key: str) -> dict[str, Key]:
    """Keys of every dict literal in ``path`` that also has ``key`` (the reply objects)."""
    found: dict[str, Key] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            names = [k.value for k in node.keys if isinstance(k, ast.Constant)]
            if key in names:
                for k in node.keys:
                    if isinstance(k, ast.Constant) and isinstance(k.value, str):
                        found.setdefault(k.value, Key(where(path, k.lineno)))
    return found


def route_keys(route: Route) -> dict[str, Key]:
    """The keys of a route's reply: its handler's dict literals, and those of the module functions it
    returns the result of (``/get_model_info`` returns ``await model_info()``)."""
    found = _dict_keys(route.handler, HTTP_SERVER)
    for node in ast.walk(route.handler):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
            for k, v in _dict_keys(FUNCTIONS[node.func.id], HTTP_SERVER).items():
                found.setdefault(k, v)
    return found


def written(path: str) -> dict[str, Key] | None:
    if path == "/generate":
        return generate_keys()
    route = ROUTES.get(path)
    return None if route is None else route_keys(route)


# ---- responses and reads ----


def check_response(item: dict[str, Any]) -> list[str]:
    path, body = item["path"], item.get("body")
    keys = written(path)
    if keys is None:
        return [f"SGLang has no route {path}"]
    problems = []
    if path == "/generate":
        from sglang.api.v1.api_types import GenerateResponse, JsonContractError

        try:
            GenerateResponse.from_json_value(body)
        except JsonContractError as e:
            problems.append(f"sglang.api.v1.api_types.GenerateResponse: {e}")
        problems += _first_input_logprob(body)
    if body in (None, {}):
        return problems
    if not isinstance(body, dict):
        return [*problems, "the reply is not a JSON object"]
    return problems + _unwritten(body, keys, path)


LOGPROB_PROCESSOR = SGLANG / "srt/managers/scheduler_components/logprob_result_processor.py"


def _first_input_logprob(body: Any) -> list[str]:
    """SGLang's input logprobs from ``logprob_start_len`` k name tokens k.. and give token k none (the
    logprob of token j comes from position j - 1, which it does not compute for j = k): an engine that
    scores token k answers what SGLang never does, and its client reads a logprob SGLang leaves null."""
    null_first = _find(LOGPROB_PROCESSOR, "[None] + input_token_logprobs[:-1]")
    meta = body.get("meta_info") if isinstance(body, dict) else None
    entries = meta.get("input_token_logprobs") if isinstance(meta, dict) else None
    if null_first is None or not isinstance(entries, list) or not entries:
        return []
    first = entries[0]
    if isinstance(first, list) and first and first[0] is not None:
        return [
            f"meta_info.input_token_logprobs[0] has logprob {first[0]}: SGLang writes null there ({null_first})"
        ]
    return []


def _unwritten(value: dict[str, Any], keys: dict[str, Key], at: str) -> list[str]:
    problems = []
    for k, v in value.items():
        if k not in keys:
            problems.append(f"{at}: {k!r} is not a key SGLang writes there")
            continue
        children = keys[k].children
        items = v if isinstance(v, list) else [v]
        if children:
            for item in items:
                if isinstance(item, dict):
                    problems += _unwritten(item, children, f"{at}.{k}")
    return problems


def check_read(item: dict[str, Any]) -> tuple[list[str], str]:
    keys = written(item["path"])
    if keys is None:
        return [f"SGLang has no route {item['path']}"], ""
    found = None
    for part in item["key"].split("."):
        if keys is None or part not in keys:
            return [f"{item['path']} {item['key']}: SGLang never writes {part!r} there"], ""
        found = keys[part]
        keys = found.children or None
    assert found is not None
    return [], found.where


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("capture", type=Path)
    parser.add_argument(
        "--vocab-size", type=int, default=None, help="the served model's (SamplingParams.verify)"
    )
    parser.add_argument(
        "--tokenizer", default=None, help="the served model's directory (stop strings need it)"
    )
    args = parser.parse_args(argv)
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer  # what SGLang's tokenizer manager loads, too

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    data = json.loads(args.capture.read_text())
    if isinstance(data, list):
        data = {"requests": data}
    verdicts: dict[str, list[dict[str, Any]]] = {"requests": [], "responses": [], "reads": []}
    for item in data.get("requests", []):
        problems = check_request(item, args.vocab_size, tokenizer)
        verdicts["requests"].append({"name": item.get("name", ""), "path": item["path"], "ok": not problems,
                                     "problems": problems})  # fmt: skip
    for item in data.get("responses", []):
        problems = check_response(item)
        verdicts["responses"].append({"name": item.get("name", ""), "path": item["path"], "ok": not problems,
                                      "problems": problems})  # fmt: skip
    for item in data.get("reads", []):
        problems, at = check_read(item)
        verdicts["reads"].append({"path": item["path"], "key": item["key"], "ok": not problems,
                                  "problems": problems, "written_at": at})  # fmt: skip
    ok = all(v["ok"] for vs in verdicts.values() for v in vs)
    print(json.dumps({"sglang": version("sglang"), "ok": ok, **verdicts}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

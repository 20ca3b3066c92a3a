"""Docs that cannot rot (``cua_stream.docs_commands``): every shell command of the pages parses against the
real CLI (or names repo files that exist); every command's help ends with an example that parses; the
commands that need nothing but the CLI are run from their pages; the tests said to run the others name
them; and a bad option, an unknown command or a missing script is a failure naming its file and line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import typer

from cua_stream import cli, docs_commands
from cua_stream.docs_commands import DocCommand, check, commands_of, how_checked, page_commands
from cua_stream.docs_reference import command_help, commands, split_example

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def root() -> Any:
    return typer.main.get_command(cli.full_app())


def all_commands() -> list[DocCommand]:
    found = []
    for pattern in docs_commands.PAGES:
        for path in sorted(ROOT.glob(pattern)):
            found += page_commands(path, path.relative_to(ROOT).as_posix())
    return found


def test_every_command_in_the_docs_parses(root: Any) -> None:
    found = all_commands()
    kinds = Counter(how_checked(c).split(" ")[0] for c in found)
    pages = {c.where.split(":")[0] for c in found}
    assert len(found) >= 90 and kinds["run"] >= 4 and kinds["syntax"] >= 1, kinds
    assert {"docs/tutorials/harbor-tasks.md", "docs/how-to/replay-and-tap.md", "README.md"} <= pages
    assert [p for c in found if (p := check(c, root, ROOT))] == []


def test_every_command_has_an_example_that_parses(root: Any) -> None:
    missing, wrong, seen = [], [], 0
    for path, command in commands(root):
        name = "cua-stream " + " ".join(path)
        _, example = split_example(command_help(command))
        if example is None:
            missing.append(name)
            continue
        (argv,) = [a for a in commands_of(example) if a[0] == "cua-stream"]  # eval "$(cua-stream ...)" too
        seen += 1
        if argv[1 : 1 + len(path)] != list(path):
            wrong.append(f"{name}: its example runs {' '.join(argv)}")
        if problem := check(DocCommand(name, tuple(argv)), root, ROOT):
            wrong.append(problem)
    assert seen >= 45 and missing == [] and wrong == []


def test_the_help_keeps_the_example(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb"}
    done = subprocess.run([sys.executable, "-m", "cua_stream", "eval", "run", "--help"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Example: cua-stream eval run --policy oracle --tasks click-button" in done.stdout


def test_the_tests_said_to_run_a_command_name_it() -> None:
    for prefix, test in docs_commands.RUN_BY.items():
        text = (ROOT / test).read_text()
        words = [f'"{w}"' for w in prefix[1:]] if prefix[0] == "cua-stream" else [Path(prefix[1]).name]
        assert all(w in text for w in words), f"{test} does not run {' '.join(prefix)}"


@pytest.mark.model
@pytest.mark.slow
def test_the_commands_that_need_only_the_cli_run_from_their_pages(tmp_path: Path) -> None:
    """Each page's runnable commands, in order, in a scratch directory of the page's own (a later command
    reads what an earlier one wrote: the tutorial's launch reads its make-tiny-model's model)."""
    runnable = [c for c in all_commands() if how_checked(c) == "run"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    for command in runnable:
        here = tmp_path / command.where.split(":")[0].replace("/", "_")
        here.mkdir(exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "cua_stream", *command.words[1:]],
                              cwd=here, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, f"{command.where}: {' '.join(command.argv)}\n{done.stderr[-2000:]}"
    assert len(runnable) >= 4
    tutorial = tmp_path / "docs_tutorials_harbor-tasks.md"
    assert (tutorial / "models" / "tiny" / "config.json").is_file() and (tutorial / "run.toml").is_file()


PAGE = """\
# A page

```bash
cua-stream tap turns --json          # fine
cua-stream tap turns --jsn
cua-stream tapp turns
bash scripts/nowhere.sh
cua-stream eval run --seeds 2 \\
  --seeds
```

<!-- needs: gpu -->
```sh
X=1 cua-stream broker start --port nine && eval "$(cua-stream containers env)"
```

```python
cua-stream not --shell
```
"""


@pytest.fixture
def mutants(tmp_path: Path, root: Any) -> dict[int, str]:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    found = page_commands(page, "docs/how-to/page.md")
    assert [c.where for c in found] == [f"docs/how-to/page.md:{n}" for n in (4, 5, 6, 7, 8, 14, 14)]
    assert found[-2].needs == {"gpu"} and found[-2].argv[:3] == ("cua-stream", "broker", "start")
    assert found[-1].argv == ("cua-stream", "containers", "env")
    problems = {}
    for command in found:
        if problem := check(command, root, ROOT):
            problems[int(command.where.rsplit(":", 1)[1])] = problem
    return problems


def test_a_bad_option_an_unknown_command_and_a_missing_script_fail_naming_file_and_line(mutants) -> None:
    assert 4 not in mutants
    assert mutants[5].startswith("docs/how-to/page.md:5: cua-stream tap: No such option: --jsn")
    assert mutants[6] == "docs/how-to/page.md:6: unknown command 'cua-stream tapp'"
    assert mutants[7] == "docs/how-to/page.md:7: scripts/nowhere.sh does not exist"
    assert mutants[8].startswith("docs/how-to/page.md:8: cua-stream eval run:") and "--seeds" in mutants[8]
    assert mutants[14].startswith(
        "docs/how-to/page.md:14: cua-stream broker start: Invalid value for '--port'"
    )  # a block that needs a GPU is parsed still


def test_an_old_spelling_on_a_page_is_a_problem_naming_the_new_one(tmp_path: Path, root: Any) -> None:
    """``eval --follow RUN`` still runs (``cli._eval_spellings``), but a page teaches the subcommand."""
    page = tmp_path / "page.md"
    page.write_text(
        "```sh\ncua-stream eval --follow r1 --every 2\ncua-stream eval follow r1 --every 2\n```\n"
    )
    old, new = page_commands(page, "docs/how-to/page.md")
    assert check(old, root, ROOT) == (
        "docs/how-to/page.md:2: cua-stream eval: an old spelling; write cua-stream eval follow r1 --every 2"
    )
    assert check(new, root, ROOT) is None


def test_how_each_command_is_checked() -> None:
    def how(where: str, *argv: str, needs: frozenset[str] = frozenset()) -> str:
        return how_checked(DocCommand(where, argv, needs))

    assert how("docs/tutorials/t.md:1", "cua-stream", "launch", "--preset", "default") == "run"
    assert how("docs/tutorials/t.md:1", "cua-stream", "tap", "--help") == "run"
    assert how("docs/deploy.md:1", "cua-stream", "launch") == "syntax"  # only tutorials and how-tos run
    assert how("docs/how-to/t.md:1", "cua-stream", "launch", needs=frozenset({"gpu"})) == "syntax"
    assert (
        how("docs/how-to/t.md:1", "cua-stream", "topics", "create")
        == "run by tests/integration/test_broker.py"
    )
    assert (
        how("docs/how-to/t.md:1", ".venv/bin/cua-stream", "eval") == "run by tests/integration/test_eval.py"
    )
    assert how("docs/how-to/t.md:1", "bash", "scripts/test.sh") == "syntax"

"""Bad input at the CLI is refused at start, before any work, in one line naming the option, exit code 2:
where results go (``eval run --out``, ``export-metrics --to``, ``containers secure-env --dir``), the bounds of
``eval follow --until-version`` and ``inspect --max-seq-len``. Each command runs as a real subprocess; none
reaches a broker (the bootstrap given, 127.0.0.1:1, would answer nothing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cua_stream.cli.common import output_problem
from cua_stream.errors import ConfigError
from cua_stream.evaluation import results as files
from cua_stream.evaluation.results import EvalResults

NO_BROKER = ("--bootstrap", "127.0.0.1:1")


def cli(*args: str, cwd: Path | None = None) -> tuple[int, str]:
    """The exit code and what the command said (the usage box's borders and wrapping taken out)."""
    done = subprocess.run(
        [sys.executable, "-m", "cua_stream", *args], capture_output=True, text=True, timeout=120, cwd=cwd,
        env=os.environ | {"COLUMNS": "300"},
    )  # fmt: skip
    return done.returncode, " ".join((done.stdout + done.stderr).replace("│", " ").split())


def test_an_output_is_a_writable_path_under_an_existing_directory(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text("{}")
    assert output_problem(tmp_path / "results.json") is None  # overwritten
    assert output_problem(tmp_path / "new.json") is None
    assert output_problem(tmp_path / "new-dir", directory=True) is None  # made when written
    assert output_problem(tmp_path, directory=True) is None
    assert output_problem(tmp_path) == f"{tmp_path} is a directory, not a file"
    assert output_problem(tmp_path / "results.json", directory=True) == (
        f"{tmp_path / 'results.json'} is a file, not a directory"
    )
    assert output_problem(tmp_path / "no" / "x.json") == f"{tmp_path / 'no'} does not exist"
    assert (
        output_problem(tmp_path / "results.json" / "x") == f"{tmp_path / 'results.json'} is not a directory"
    )


def test_an_output_under_a_directory_this_user_cannot_write_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() == 0:  # root writes past a directory's mode; procfs's sysctl tree refuses even root
        locked = Path("/proc/sys")
    assert output_problem(locked / "x.json") == f"{locked} is not writable"


def test_eval_refuses_an_out_it_could_not_write_before_any_episode(tmp_path: Path) -> None:
    # before: a directory ran every episode, then a traceback, and nothing was published
    code, said = cli("eval", "run", "--policy", "oracle", "--out", str(tmp_path), *NO_BROKER)
    assert (
        code == 2 and "Invalid value for --out" in said and f"{tmp_path} is a directory, not a file" in said
    )
    # before: the missing directories were made
    code, said = cli(
        "eval", "run", "--policy", "oracle", "--out", str(tmp_path / "no" / "such" / "x.json"), *NO_BROKER
    )
    assert code == 2 and f"--out: {tmp_path / 'no' / 'such'} does not exist" in said, said
    assert not (tmp_path / "no").exists()
    # following a run, --out is the directory of one file per version
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (tmp_path / "f.json").write_text("{}")
    code, said = cli("eval", "follow", "train-1", "--model-path", str(model), "--out", str(tmp_path / "f.json"),
                     *NO_BROKER)  # fmt: skip
    assert code == 2 and "--out" in said and "f.json is a file, not a directory" in said, said


def test_eval_names_the_option_out_of_range() -> None:
    code, said = cli("eval", "follow", "train-1", "--until-version", "-5", *NO_BROKER)
    assert code == 2 and "Invalid value for --until-version: at least 0" in said and "--every" not in said, (
        said
    )
    code, said = cli("eval", "follow", "train-1", "--every", "0", *NO_BROKER)
    assert code == 2 and "Invalid value for --every: at least 1" in said, said


def test_eval_takes_the_common_prefix_option() -> None:
    for command in ("run", "follow"):
        code, said = cli("eval", command, "--help")
        assert code == 0 and "--prefix" in said and "CUA_TOPIC_PREFIX" in said


def test_the_old_spellings_of_eval_run_their_subcommand_and_name_the_new_one(tmp_path: Path) -> None:
    code, said = cli("eval", "--policy", "oracle", "--out", str(tmp_path), *NO_BROKER)
    assert code == 2 and f"{tmp_path} is a directory, not a file" in said, said
    assert (
        f"note: an old spelling, which still runs; now: python -m cua_stream eval run --policy oracle --out {tmp_path}"
        in said
    )
    code, said = cli("eval", "--until-version", "-5", "--follow", "train-1", *NO_BROKER)
    assert code == 2 and "Invalid value for --until-version: at least 0" in said, said
    assert (
        "now: python -m cua_stream eval follow train-1 --until-version -5 --bootstrap 127.0.0.1:1" in said
    ), said
    results = EvalResults(run_id="eval-1", policy="oracle", environment="scripted", samples=1, seeds=[],
                          tasks=[], created_at=0.0, episodes=[])  # fmt: skip
    for name in ("a.json", "b.json"):
        files.save(tmp_path / name, results)
    code, said = cli("eval", "--compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert (
        code == 0 and "A oracle vs B oracle" in said and "now: python -m cua_stream eval compare" in said
    ), said
    code, said = cli("eval", "--table", str(tmp_path / "a.json"), "--table=" + str(tmp_path / "b.json"))
    assert code == 0 and "Table written to" in said, said
    assert f"now: python -m cua_stream eval table {tmp_path / 'a.json'} {tmp_path / 'b.json'}" in said, said


def test_a_bad_option_in_either_spelling_of_eval_is_one_line_and_exit_2() -> None:
    for args in (("eval", "run", "--polcy", "oracle"), ("eval", "--polcy", "oracle")):
        code, said = cli(*args)
        assert code == 2 and "error: python -m cua_stream eval run: No such option: --polcy" in said, said
        assert "╭" not in said and "Usage:" not in said, said  # not click's boxed usage screen
    code, said = cli("eval", "--follow")
    assert (
        code == 2 and "error: python -m cua_stream eval: Option '--follow' requires an argument." in said
    ), said
    code, said = cli("eval", "--compare", "a.json")
    assert code == 2 and "Option '--compare' requires 2 arguments." in said, said


def test_a_results_file_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    results = EvalResults(run_id="eval-1", policy="oracle", environment="scripted", samples=1, seeds=[],
                          tasks=[], created_at=0.0, episodes=[])  # fmt: skip
    with pytest.raises(ConfigError, match=f"{tmp_path}: cannot write the results"):
        files.save(tmp_path, results)


def test_inspect_refuses_a_max_seq_len_below_one(tmp_path: Path) -> None:
    # before: accepted, and every sample cut to nothing reported as a mismatch
    for command in ("step", "episode"):
        extra = ("--step", "1") if command == "step" else ("ep-1",)
        code, said = cli("inspect", command, "--run", "r", *extra, "--max-seq-len", "0", *NO_BROKER)
        assert code == 2 and "Invalid value for '--max-seq-len'" in said, said
    config = tmp_path / "run.toml"
    config.write_text("[trainer]\nmax_seq_len = 0\n")  # as the trainer's own config refuses it
    code, said = cli("inspect", "step", "--run", "r", "--step", "1", "--config", str(config), *NO_BROKER)
    assert code == 2 and "error: trainer.max_seq_len: must be >= 1, not 0" in said, said


def test_export_metrics_refuses_a_file_for_its_directory(tmp_path: Path) -> None:
    a_file = tmp_path / "runs"
    a_file.write_text("")
    code, said = cli("export-metrics", "--run", "r1", "--to", "tensorboard", str(a_file), *NO_BROKER)
    assert code == 2 and f"Invalid value for --to: {a_file} is a file, not a directory" in said, said


def test_secure_env_refuses_a_file_and_an_empty_directory_name(tmp_path: Path) -> None:
    a_file = tmp_path / "secrets"
    a_file.write_text("")
    code, said = cli("containers", "secure-env", "--dir", str(a_file))
    assert code == 2 and f"Invalid value for --dir: {a_file} is a file, not a directory" in said, said
    here = tmp_path / "here"
    here.mkdir()
    code, said = cli("containers", "secure-env", "--dir", "", cwd=here)
    assert code == 2 and "Invalid value for --dir: give a directory" in said, said
    assert list(here.iterdir()) == []  # before: the CA, the keys and the passwords were written here

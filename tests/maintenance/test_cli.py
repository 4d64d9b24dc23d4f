"""The txnlog command: human and --json output, exit codes, the one-line error for a missing
table, and a progress bar only on a terminal. Commands run in this process through click's test
runner (a new interpreter per command cost a second each); the installed script, ``python -m
txnlog`` in another working directory and the terminal run as real processes."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from txnlog.cli import cli
from txnlog.maintenance import tags

from .conftest import age, build

TXNLOG = [sys.executable, "-m", "txnlog"]


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def run(*args: str, check_code: int | None = 0) -> Ran:
    """``txnlog *args`` as the command line runs it: the same entry point, its exit code, its
    stdout and stderr apart. An exception the command lets escape fails the test as it is."""
    result = CliRunner().invoke(cli, list(args), prog_name="txnlog", catch_exceptions=False)
    proc = Ran(result.exit_code, result.stdout, result.stderr)
    if check_code is not None:
        assert proc.returncode == check_code, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def run_json(*args: str, check_code: int = 0) -> object:
    proc = run(*args, "--json", check_code=check_code)
    return json.loads(proc.stdout)  # the whole of stdout is one JSON document


def test_console_script_is_installed():
    script = os.path.join(os.path.dirname(sys.executable), "txnlog")
    proc = subprocess.run([script, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "vacuum" in proc.stdout and "exit codes" in proc.stdout.lower()


def test_describe_history_files_checkpoint(table_path):
    table = build(table_path, 4)
    uri = str(table_path)
    human = run("describe", uri).stdout
    assert "version" in human and "4" in human and "part" in human
    d = run_json("describe", uri)
    assert d["version"] == 4 and d["numFiles"] == 4 and d["numRows"] == 4 and d["numPartitions"] == 2
    assert d["protocol"]["minWriterVersion"] == 2 and d["partitionColumns"] == ["part"]
    history = run_json("history", uri, "--limit", "2")
    assert [h["version"] for h in history] == [4, 3] and history[0]["operation"] == "WRITE"
    assert "WRITE" in run("history", uri).stdout
    files = run_json("files", uri, "--where", "part = 'a'")
    assert sorted(f["numRecords"] for f in files) == [1, 1] and all(f["partitionValues"] == {"part": "a"} for f in files)
    assert len(run_json("files", uri, "--version", "1")) == 1
    human_files = run("files", uri).stdout
    assert "4 files" in human_files
    cp = run_json("checkpoint", uri)
    assert cp["version"] == 4 and cp["numAddFiles"] == 4 and cp["paths"][0].endswith(".checkpoint.parquet")
    assert table.store.exists(cp["paths"][0])


def test_validate_exit_codes(table_path):
    table = build(table_path, 3)
    uri = str(table_path)
    assert "OK" in run("validate", uri).stdout
    victim = table.snapshot().files().column("path").to_pylist()[0]
    os.unlink(os.path.join(str(table_path), victim))
    proc = run("validate", uri, check_code=1)
    assert "missing-file" in proc.stdout and victim in proc.stdout
    report = run_json("validate", uri, check_code=1)
    assert report["ok"] is False and report["problems"][0]["kind"] == "missing-file" and report["problems"][0]["path"] == victim


def test_missing_table_is_one_line_and_its_own_exit_code(tmp_path):
    missing = str(tmp_path / "nothing-here")
    proc = run("describe", missing, check_code=3)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("txnlog: error:") and "no Delta table" in lines[0] and missing in lines[0]
    assert "Traceback" not in proc.stderr
    doc = run_json("history", missing, check_code=3)
    assert doc["error"]["type"] == "TableNotFoundError" and doc["error"]["exitCode"] == 3
    debug = run("describe", missing, "--debug", check_code=3)
    assert "Traceback" in debug.stderr


def test_usage_errors_exit_2(table_path):
    build(table_path, 1)
    assert run("expire", str(table_path), "--older-than", "soon", check_code=2).stderr.count("--older-than") >= 1
    run("restore", str(table_path), check_code=2)
    run("files", str(table_path), "--timestamp", "yesterday", check_code=2)
    run("describe", str(table_path), "--storage-option", "novalue", check_code=2)
    run("frobnicate", check_code=2)


def test_a_bad_where_predicate_is_a_usage_error(table_path):
    build(table_path, 1)
    proc = run("files", str(table_path), "--where", "part = ", check_code=2)
    assert proc.stdout == "" and "part = " in proc.stderr and proc.stderr.count("\n") == 1
    error = run_json("files", str(table_path), "--where", "nope > 1", check_code=2)["error"]
    assert error["type"] == "InvalidPredicateError" and "nope" in error["message"]


def test_vacuum_dry_run_says_why_each_file_stays_or_goes(table_path):
    table = build(table_path, 2)
    uri = str(table_path)
    table.delete("id = 1")
    kept = run("vacuum", uri, "--dry-run", "--retention", "0s", "--force").stdout
    assert "keep" in kept and "added at version 1, still in the log" in kept and "Would delete 0 files" in kept
    assert "Kept 1 file live at the latest version; 1 read by versions still in the log." in kept and "--rule delta" in kept
    doc = run_json("vacuum", uri, "--dry-run", "--retention", "0s", "--force", "--rule", "delta")
    assert doc["rule"] == "delta" and doc["numFiles"] == 1 and doc["numLiveFiles"] == 1
    assert [(d["action"], d["reason"]) for d in doc["decisions"]] == [("delete", "removed-long-ago")]
    assert doc["decisions"][0]["path"] == doc["files"][0]
    run("vacuum", uri, "--rule", "spark", check_code=2)


def test_counts_and_sizes_read_as_english(table_path):
    table = build(table_path, 1)
    uri = str(table_path)
    size = table.snapshot().files().column("size")[0].as_py()
    assert size < 1024
    assert f"1 file, {size} bytes" in run("files", uri).stdout
    assert "0 files, 0 bytes" in run("files", uri, "--where", "part = 'zzz'").stdout
    assert "Would delete 0 files, 0 bytes (rule: versions)." in run("vacuum", uri, "--dry-run").stdout
    assert "Checkpoint of version 1: 1 file," in run("checkpoint", uri).stdout


@pytest.mark.parametrize(
    "args, names",
    [
        pytest.param(["describe", "{uri}", "--version", "x"], "--version", id="bad-version"),
        pytest.param(["describe", "{uri}", "--bogus"], "--bogus", id="unknown-option"),
        pytest.param(["vacuum", "{uri}", "--retention", "-5s"], "--retention", id="negative-retention"),
        pytest.param(["expire", "{uri}", "--older-than", "-1d"], "--older-than", id="negative-older-than"),
        pytest.param(["expire", "{uri}", "--retain-min", "-1"], "--retain-min", id="negative-retain-min"),
        pytest.param(["history", "{uri}", "--limit", "-1"], "--limit", id="negative-history-limit"),
        pytest.param(["describe"], "URI", id="missing-argument"),
        pytest.param(["tag", "{uri}", "create"], "NAME", id="missing-subcommand-argument"),
        pytest.param(["restore", "{uri}"], "--version", id="restore-needs-a-version"),
        pytest.param(["frobnicate", "{uri}"], "frobnicate", id="unknown-command"),
    ],
)
def test_json_usage_error_is_one_json_document(table_path, args, names):
    build(table_path, 1)
    proc = run(*[a.format(uri=table_path) for a in args], "--json", check_code=2)
    error = json.loads(proc.stdout)["error"]  # the whole of stdout is one JSON document
    assert error["type"] == "UsageError" and error["exitCode"] == 2 and names in error["message"], error
    assert proc.stderr == f"txnlog: error: {error['message']}\n"
    human = run(*[a.format(uri=table_path) for a in args], check_code=2)  # click's usage text, as before
    assert human.stdout == "" and "Usage:" in human.stderr and names in human.stderr


def test_table_path_that_is_a_file_exits_3_and_names_it(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("a,b\n")
    proc = run("describe", str(path), check_code=3)
    assert proc.stdout == "" and "data.csv" in proc.stderr and "is a file" in proc.stderr and proc.stderr.count("\n") == 1
    error = run_json("history", str(path), check_code=3)["error"]
    assert error["exitCode"] == 3 and "data.csv" in error["message"]
    assert path.read_text() == "a,b\n"


@pytest.mark.parametrize("args", [["describe", ""], ["describe", " "], ["validate", ""], ["tag", "", "list"], ["consumer", "", "list"]])
def test_empty_table_uri_is_refused(table_path, args):
    build(table_path, 1)  # the current directory is a table: '' must not describe it
    proc = subprocess.run([*TXNLOG, *args, "--json"], capture_output=True, text=True, timeout=120, cwd=table_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    error = json.loads(proc.stdout)["error"]
    assert error["type"] == "UsageError" and "'URI'" in error["message"] and "empty" in error["message"]


def test_conflict_exit_code(table_path, monkeypatch):
    """A RESTORE that loses to a concurrent delete of a file it keeps exits 4. The concurrent
    commit is injected while the restore checks its files (in-process, to time the race)."""
    from click.testing import CliRunner

    from txnlog import cli
    from txnlog.maintenance import restoring

    table = build(table_path, 3)
    real_missing = restoring._missing

    def concurrent_delete(*args, **kwargs):
        with table.transaction("DELETE") as txn:
            txn.remove_files(txn.filter_files("id = 1"))
        return real_missing(*args, **kwargs)

    monkeypatch.setattr(restoring, "_missing", concurrent_delete)
    result = CliRunner().invoke(cli.cli, ["restore", str(table_path), "--version", "2"])
    assert result.exit_code == cli.EXIT_CONFLICT == 4, result.output
    assert "txnlog: error:" in result.output and "version 4" in result.output


def test_expire_vacuum_restore_tag_consumer(table_path):
    table = build(table_path, 12)
    uri = str(table_path)
    age(table, range(13), days=60)
    assert run_json("tag", uri, "create", "gold", "--version", "3")["version"] == 3
    assert run("tag", uri, "create", "gold", check_code=1).stderr.startswith("txnlog: error: tag 'gold' already exists")
    assert [t["name"] for t in run_json("tag", uri, "list")] == ["gold"]
    assert "gold" in run("tag", uri, "list").stdout

    from txnlog.maintenance import consumers

    consumers.record(table, "reader-1", 8)
    assert run_json("consumer", uri, "list")[0]["nextVersion"] == 8
    assert run_json("consumer", uri, "reset", "reader-1", "--version", "9")["nextVersion"] == 9
    assert run("consumer", uri, "reset", "ghost", "--version", "9", check_code=1).stderr.count("\n") == 1

    dry = run_json("expire", uri, "--retain-min", "2", "--dry-run")
    assert dry["dryRun"] and dry["earliestAfter"] == 9 and dry["keptTags"] == ["gold"]
    assert "Would expire" in run("expire", uri, "--retain-min", "2", "--dry-run").stdout
    done = run_json("expire", uri, "--retain-min", "2", "--limit", "100")
    assert done["earliestAfter"] == 9 and done["checkpointWritten"] == 9
    assert run_json("consumer", uri, "delete", "reader-1")["id"] == "reader-1"
    assert run_json("expire", uri, "--retain-min", "2", "--limit", "100")["earliestAfter"] == 11

    orphan = os.path.join(uri, "part=a", "orphan.parquet")
    with open(orphan, "wb") as f:
        f.write(b"z" * 21)
    os.utime(orphan, (time.time() - 30 * 86_400,) * 2)
    refused = run("vacuum", uri, "--retention", "0s", check_code=1)
    assert "--force" in refused.stderr and os.path.exists(orphan)
    dry_vacuum = run("vacuum", uri, "--dry-run").stdout
    assert "part=a/orphan.parquet" in dry_vacuum and "21 bytes" in dry_vacuum
    vacuumed = run_json("vacuum", uri)
    assert vacuumed["files"] == ["part=a/orphan.parquet"] and vacuumed["sizeInBytes"] == 21 and not os.path.exists(orphan)

    restored = run_json("restore", uri, "--version", "3")
    assert restored["restoredVersion"] == 3 and restored["numOfFilesAfterRestore"] == 3
    assert "Restored" in run("restore", uri, "--version", "11").stdout
    assert run_json("tag", uri, "delete", "gold")["name"] == "gold"
    assert tags.list_tags(table) == []


def test_progress_bar_only_on_a_terminal(table_path):
    build(table_path, 3)
    piped = run("validate", str(table_path))
    assert piped.stderr == ""  # no bar when stderr is not a terminal
    pid, fd = pty.fork()
    if pid == 0:  # the child: stdout and stderr are the terminal
        os.environ["TERM"] = "xterm"
        os.environ["COLUMNS"] = "100"
        os.execv(sys.executable, [*TXNLOG, "validate", str(table_path)])
    output = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    text = output.decode(errors="replace")
    assert "checking" in text and "OK" in text  # the bar's stage, then the result


@pytest.mark.parametrize("command", [["describe"], ["history"], ["files"], ["validate"], ["tag", "{uri}", "list"], ["consumer", "{uri}", "list"]])
def test_json_output_is_one_document(table_path, command):
    build(table_path, 2)
    uri = str(table_path)
    args = [c.format(uri=uri) for c in command] if "{uri}" in " ".join(command) else [*command, uri]
    proc = run(*args, "--json")
    json.loads(proc.stdout)
    assert proc.stderr == ""

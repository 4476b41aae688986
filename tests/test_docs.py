"""The README and docs/ as a newcomer meets them: short, linked, their figures written from
results/ by `flushless report --docs`, and no internal issue numbers in what users read."""

import glob
import json
import os
import re
import subprocess
import sys

import pytest

from flushless.experiments import study
from flushless.experiments.results import write_experiment
from flushless.progress import ToolError
from flushless.report import claims, document
from flushless.testbed.build import REPO

README = os.path.join(REPO, "README.md")
DOCS = sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
# A terminal's first screen, and the README's length.
FIRST_SCREEN, README_MAX = 60, 200


def table_rows(text):
    return [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| claim |")]


def cells(row):
    return [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]


def test_the_readme_is_short_and_its_first_screen_has_what_a_newcomer_needs():
    lines = open(README).read().splitlines()
    assert len(lines) <= README_MAX, len(lines)
    first = "\n".join(lines[:FIRST_SCREEN])
    for needed in ("make test", "make reproduce", document.HEADLINE_BEGIN, document.HEADLINE_END,
                   "## Documentation", "docs/claims.md"):
        assert needed in first, needed


def test_every_relative_link_resolves():
    broken = []
    for path in [README] + DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", open(path).read()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not os.path.exists(os.path.join(os.path.dirname(path), target)):
                broken.append("%s -> %s" % (os.path.relpath(path, REPO), target))
    assert broken == []


ISSUE = re.compile(r"\b[Ii]ssues? #?\d+|\B#\d+\b")


def test_no_internal_issue_numbers_in_what_users_read():
    found = ["%s: %s" % (os.path.relpath(p, REPO), m.group(0)) for p in [README] + DOCS
             for m in ISSUE.finditer(open(p).read())]
    commands = ["", "build", "run", "reproduce", "report", "census", "series", "check-staging", "compare", "shell"]
    for cmd in commands:
        out = subprocess.run([sys.executable, "-m", "flushless"] + ([cmd] if cmd else []) + ["--help"], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60).stdout
        found += ["flushless %s --help: %s" % (cmd, m.group(0)) for m in ISSUE.finditer(out)]
    assert found == []


def test_claims_doc_and_headline_are_one_rendering_of_the_code_s_claims():
    text = open(os.path.join(REPO, document.CLAIMS_DOC)).read()
    assert text.startswith("# Claims and how to check each\n\nWritten by `flushless report --docs` from the "
                           "results of the default run of ")
    rows = [cells(r) for r in table_rows(text)]
    assert rows
    verdicts = {"reproduced", "not reproduced", "holds", "does not hold"}
    for claim, paper, ours, verdict, rule, command, path in rows:
        assert verdict in verdicts and ours and rule, claim
        stage = re.fullmatch(r"`flushless reproduce --stages (\w+)`", command).group(1)
        assert re.fullmatch(r"`results/(\w+)\.json`", path).group(1) in study.STAGE_OUTPUTS[stage], claim
    # The README's rows are the same rows, from the same run.
    readme = open(README).read()
    block = readme[readme.index(document.HEADLINE_BEGIN):readme.index(document.HEADLINE_END)]
    stamp = re.search(r"the default run of (\S+) \(flushless (\w+)\)", text).groups()
    assert "the default run of %s (flushless %s)" % stamp in block
    full = {r[0]: r[:4] for r in rows}
    head = [cells(r) for r in table_rows(block)]
    assert head and all(full[r[0]] == r for r in head), head
    assert {r[0] for r in head} == {r[0] for r in rows if r[0].startswith(claims.HEADLINE)}


def test_a_partial_run_is_refused_for_the_docs(tmp_path):
    results = str(tmp_path / "results")
    write_experiment(results, "flush_frequency", {"profile": "default", "time_scale": {}}, [{"minute": 0}])
    with pytest.raises(ToolError, match="whole default run only .*stages missing"):
        document.write_docs(results, str(tmp_path))
    assert not os.path.exists(tmp_path / document.CLAIMS_DOC)


def test_the_headline_replaces_only_its_block():
    readme = "# x\n\nabove\n%s\nold\n%s\nbelow\n" % (document.HEADLINE_BEGIN, document.HEADLINE_END)
    new = document.replace_headline(readme, "%s\nnew\n%s" % (document.HEADLINE_BEGIN, document.HEADLINE_END))
    assert new == readme.replace("old", "new")
    with pytest.raises(ToolError, match="needs one"):
        document.replace_headline("no markers", "x")


def test_a_cell_with_a_pipe_stays_one_cell():
    md = claims.markdown([{"claim": "a | b", "paper": "p", "ours": "o", "verdict": "holds",
                           "command": "c", "file": "f"}])
    assert cells(table_rows(md)[0]) == ["a \\| b", "p", "o", "holds", "`c`", "`f`"]


def test_every_report_claim_names_a_stage_that_writes_its_file():
    with open(document.PUBLISHED) as f:
        pub = json.load(f)
    for experiment in {c for names in study.STAGE_OUTPUTS.values() for c in names}:
        stage = claims.command_of(experiment).split()[-1]
        assert experiment in study.STAGE_OUTPUTS[stage]
    assert claims.claims({}, pub) == []

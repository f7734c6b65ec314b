"""``report.html``: the run on one offline page, built from a real run of the built-in collector, and opened
in a real browser (headless Chromium, Debian's package: ``scripts/debian_tools.sh``, which ``make test`` runs).

The profiled script is plain Python marked with a ``# autoitt: step`` comment, so the page is tested on every
Python version the suite runs on, frameworks or not.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import pytest

from instrumenter.builtin.output.html import MAX_BYTES, flame_trees
from tests.test_profile import autoitt

SCRIPT = textwrap.dedent("""
    def square_sum(n):
        total = 0
        for i in range(n):
            total += i * i
        return total


    def cube_sum(n):
        return sum(i * i * i for i in range(n))


    for step in range(40):  # autoitt: step
        square_sum(150000)
        cube_sum(50000)
    print("done")
""")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("html")
    (root / "loop.py").write_text(SCRIPT)
    done = autoitt("profile", "-r", str(root / "out"), "loop.py", cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "out"


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "no chromium on PATH: scripts/debian_tools.sh installs Debian's package (make test runs it)"
    return found


def browse(page: Path, *args: str, fragment: str = "") -> subprocess.CompletedProcess:
    """Chromium, headless, on ``page`` from disk, its timers run (virtual time) before it answers."""
    return subprocess.run([chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--virtual-time-budget=8000", *args, f"{page.as_uri()}{fragment}"],
                          capture_output=True, text=True, timeout=120)


class Elements(HTMLParser):
    """Every start tag of a page: (tag, attributes)."""

    def __init__(self) -> None:
        super().__init__()
        self.found = []

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))


def elements(text: str):
    parser = Elements()
    parser.feed(text)
    return parser.found


def status(dom: str) -> dict:
    return next(attrs for tag, attrs in elements(dom) if attrs.get("id") == "autoitt-status")


def test_every_built_in_run_writes_its_report_html(run):
    page = run / "report.html"
    assert page.is_file() and page.stat().st_size < MAX_BYTES


def test_the_page_has_each_section_and_the_step_chart_inline(run):
    found = elements((run / "report.html").read_text())
    ids = {attrs.get("id") for _, attrs in found}
    assert {"summary", "steps", "phases", "operators", "hotspots", "lines", "flame", "flame-data"} <= ids
    assert any(tag == "svg" for tag, _ in found) and any(tag == "polyline" for tag, _ in found)


def test_the_page_asks_for_nothing_outside_itself(run):
    text = (run / "report.html").read_text()
    found = elements(text)
    assert not [attrs for tag, attrs in found if attrs.get("src") or (tag == "link" and attrs.get("href"))]
    policy = next(attrs["content"] for tag, attrs in found if attrs.get("http-equiv") == "Content-Security-Policy")
    assert policy.startswith("default-src 'none'")


def test_the_page_opens_in_chromium_with_no_error_and_no_request(run):
    done = browse(run / "report.html", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    said = status(done.stdout)
    assert (said["data-errors"], said["data-blocked"]) == ("0", "0")
    assert int(said["data-frames"]) >= 5  # the flame graph drew the region's frames


def test_clicking_a_flame_graph_frame_zooms_it_to_the_charts_width(run):
    said = status(browse(run / "report.html", "--dump-dom", fragment="#selftest-zoom").stdout)
    before, after, width = (float(said[k]) for k in ("data-zoom-before", "data-zoom-after", "data-chart-width"))
    assert before < 0.9 * width and after == pytest.approx(width, abs=1.5)


def test_a_screenshot_of_the_page_shows_it_drawn(run, tmp_path):
    shot = tmp_path / "page.png"
    done = browse(run / "report.html", "--window-size=1280,3000", f"--screenshot={shot}", fragment="#selftest")
    assert done.returncode == 0 and shot.stat().st_size > 50_000  # a blank page of that size is a few KB


def test_report_html_writes_the_page_again_and_says_where(run):
    (run / "report.html").unlink()
    done = autoitt("report", str(run), "--html")
    assert done.returncode == 0, done.stderr
    assert (run / "report.html").is_file() and f"report.html written: {run / 'report.html'}" in done.stderr


def test_the_flame_graph_has_a_tree_per_region_the_training_first():
    trees = flame_trees(["[outside collection];main;import 50", "[step];loop;a 30", "[step];loop;b 10",
                         "[eval];e 5"])
    assert list(trees) == ["[step]", "[eval]", "[outside collection]"]
    step = trees["[step]"]
    assert step["value"] == 40 and step["children"][0]["name"] == "loop" and step["children"][0]["value"] == 40
    assert sorted((c["name"], c["value"]) for c in step["children"][0]["children"]) == [("a", 30), ("b", 10)]


def test_the_flame_graph_keeps_the_most_sampled_frames_and_leaves_the_rest_in_their_parent():
    trees = flame_trees(["[step];loop;a 30", "[step];loop;b 1"], budget=3)
    loop = trees["[step]"]["children"][0]
    assert loop["value"] == 31 and [c["name"] for c in loop["children"]] == ["a"]


def test_a_frame_named_like_the_end_of_a_script_cannot_end_the_pages_data_early(tmp_path):
    from instrumenter.builtin.output.html import _script_json

    assert "</script>" not in _script_json(flame_trees(["[step];</script><b>x 3"]))
    assert json.loads(_script_json({"a": "</script>"})) == {"a": "</script>"}


def test_the_flame_graph_of_a_run_with_many_distinct_stacks_keeps_at_most_its_budget():
    from instrumenter.builtin.output.html import FLAME_NODES

    folded = [f"[step];main;f{i % 300};g{i};h{i} {1 + i % 7}" for i in range(60000)]

    def count(node):
        return 1 + sum(count(child) for child in node.get("children", ()))

    trees = flame_trees(folded)
    assert count(trees["[step]"]) <= FLAME_NODES
    assert trees["[step]"]["value"] == sum(1 + i % 7 for i in range(60000))  # nothing lost at the top

"""report.html in a real browser: headless Chromium loads it with no console error and every
image decodes. Skips (with the reason) where no Chromium is installed; `.ci/run` installs the
Debian package."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from entrena.api.reporting import report
from test_report import write_run

CHROMIUM = next((found for name in ("chromium", "chromium-browser", "google-chrome",
                                    "google-chrome-stable") if (found := shutil.which(name))),
                None)

PROBE = """<script>
window.__errors = [];
window.addEventListener('error', e => __errors.push(
  String(e.message || (e.target && e.target.src)).slice(0, 120)), true);
const __consoleError = console.error;
console.error = (...args) => { __errors.push(args.join(' ')); __consoleError(...args); };
window.addEventListener('load', () => {
  // after `load` every image has loaded or failed; a decoded one has its natural size
  const decoded = [...document.images].map(
    i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0);
  const out = document.createElement('pre');
  out.id = 'probe';
  out.textContent = JSON.stringify({errors: __errors, decoded: decoded,
                                    headline: document.querySelector('.headline').innerText});
  document.body.appendChild(out);
});
</script>"""


def render(page_path, tmp_path):
    """Load a copy of ``page_path`` with the probe first in <head>; return (probe, stderr)."""
    probed = tmp_path / "probed.html"
    probed.write_text(page_path.read_text(encoding="utf-8").replace("<head>", "<head>" + PROBE, 1),
                      encoding="utf-8")
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
         "--v=0", "--virtual-time-budget=10000", "--dump-dom", probed.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    found = re.search(r'<pre id="probe">(.*?)</pre>', result.stdout, re.DOTALL)
    assert found, f"Chromium returned no probe (exit {result.returncode}): {result.stderr[-2000:]}"
    import html

    return json.loads(html.unescape(found.group(1))), result.stderr


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on PATH (install the Debian package "
                                             "`chromium`, as .ci/run does) to render report.html")
def test_the_report_loads_in_chromium_without_errors_and_its_images_decode(tmp_path):
    run_dir = tmp_path / "runs" / "r"
    write_run(run_dir)
    probe, stderr = render(report(run_dir), tmp_path)
    assert probe["errors"] == []
    assert len(probe["decoded"]) == 8 and all(probe["decoded"])
    assert [line for line in stderr.splitlines() if ":CONSOLE" in line] == []
    assert probe["headline"].startswith("test accuracy 75.0% vs 80.0% for the TF-IDF + "
                                        "logistic regression baseline")

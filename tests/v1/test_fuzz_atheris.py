"""A bounded atheris session over the protocol core (skipped when atheris is not
installed: it is the optional ``fuzz`` extra)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import ROOT

pytest.importorskip("atheris")


def test_atheris_protocol_session(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.v1.atheris_protocol", "-runs=20000",
         "-max_len=512", f"-artifact_prefix={tmp_path}/"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Done 20000 runs" in result.stderr

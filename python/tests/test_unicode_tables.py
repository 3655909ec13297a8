"""text/unicode_tables.h is what scripts/gen-unicode-tables.py makes of Unicode 15.0 (the
unicodedata2 package pinned to it, in the venv): a table edited by hand, or generated from another
Unicode version, fails here."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_unicode_tables_are_the_generators_output():
    ud = pytest.importorskip("unicodedata2")
    if ud.unidata_version != "15.0.0":
        pytest.skip(f"unicodedata2 has Unicode {ud.unidata_version}; the tables are 15.0's")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen-unicode-tables.py")],
                         capture_output=True, text=True, check=True).stdout
    with open(os.path.join(ROOT, "text", "unicode_tables.h")) as f:
        assert f.read() == out, "regenerate: python3 scripts/gen-unicode-tables.py > " \
                                "text/unicode_tables.h"

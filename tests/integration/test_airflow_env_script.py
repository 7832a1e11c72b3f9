"""scripts/airflow-env.sh renders secrets the api-server accepts without warnings."""

import configparser
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _render(home: Path) -> configparser.ConfigParser:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    subprocess.run(["bash", str(ROOT / "scripts" / "airflow-env.sh")], check=True, capture_output=True,
                   env={**env, "AIRFLOW_HOME": str(home), "DLPERF_SKIP_DB": "1"}, timeout=120)
    c = configparser.ConfigParser(interpolation=None)
    c.read(home / "airflow.cfg")
    return c


def test_jwt_secret_is_long_enough_for_hs512_and_kept(tmp_path):
    c = _render(tmp_path)
    first = c.get("api_auth", "jwt_secret")
    assert len(first.encode()) >= 64  # PyJWT's minimum for HS512
    assert _render(tmp_path).get("api_auth", "jwt_secret") == first  # kept across re-renders
    assert oct((tmp_path / "airflow.cfg").stat().st_mode & 0o777) == "0o600"


def test_a_short_old_jwt_secret_is_replaced(tmp_path):
    (tmp_path / "airflow.cfg").write_text("[api_auth]\njwt_secret = short\n")
    assert len(_render(tmp_path).get("api_auth", "jwt_secret").encode()) >= 64

#!/usr/bin/env bash
# Set up an Airflow home for dlperf: render airflow.cfg.template, migrate the metadata DB
# (SQLite by default), create the trial pool.
#
#   scripts/airflow-env.sh            # AIRFLOW_HOME defaults to <project>/.airflow
#   AIRFLOW_HOME=/tmp/af API_PORT=8793 scripts/airflow-env.sh
#
# Afterwards:  export AIRFLOW_HOME=<that dir>; .venv/bin/airflow dags list
# Re-running is safe: the config is re-rendered (secrets kept), the DB migrated in place.
# DLPERF_SKIP_DB=1 only renders the config (the test fixtures migrate later).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$ROOT/.airflow}"
API_PORT="${API_PORT:-8080}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
AIRFLOW="$(dirname "$PY")/airflow"
mkdir -p "$AIRFLOW_HOME" "$ROOT/.run/work" "$ROOT/.run/store"
chmod 700 "$AIRFLOW_HOME"
CFG="$AIRFLOW_HOME/airflow.cfg"
export AIRFLOW_CONFIG="$CFG"

# Render the template; secrets are generated here (kept across re-renders), never templated.
"$PY" - "$ROOT/airflow.cfg.template" "$CFG" "$ROOT" "$AIRFLOW_HOME" "$API_PORT" <<'PYEOF'
import base64, configparser, os, secrets, sys
template, cfg, root, home, port = sys.argv[1:]
old = configparser.ConfigParser(interpolation=None)
if os.path.exists(cfg):
    old.read(cfg)
def keep(section, key, make, min_len=1):
    value = old.get(section, key, fallback="")
    return value if len(value) >= min_len else make()
text = open(template).read()
for k, v in {"@DLPERF_ROOT@": root, "@AIRFLOW_HOME@": home, "@API_PORT@": port}.items():
    text = text.replace(k, v)
extra = {
    # HS512 wants a key of at least 64 bytes (PyJWT warns below): an older, shorter one is replaced
    ("api_auth", "jwt_secret"): keep("api_auth", "jwt_secret", lambda: secrets.token_urlsafe(64), min_len=64),
    ("api", "secret_key"): keep("api", "secret_key", lambda: secrets.token_urlsafe(32)),
    ("core", "fernet_key"): keep("core", "fernet_key", lambda: base64.urlsafe_b64encode(os.urandom(32)).decode()),
}
parser = configparser.ConfigParser(interpolation=None)
parser.read_string(text)
for (section, key), value in extra.items():
    if not parser.has_section(section):
        parser.add_section(section)
    parser.set(section, key, value)
fd = os.open(cfg + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(fd, "w") as fh:
    fh.write("# Rendered from airflow.cfg.template by scripts/airflow-env.sh; holds generated secrets.\n")
    parser.write(fh)
os.replace(cfg + ".tmp", cfg)
PYEOF

if [ "${DLPERF_SKIP_DB:-0}" = 1 ]; then echo "config rendered to $CFG (DB step skipped)"; exit 0; fi
"$AIRFLOW" db migrate >"$AIRFLOW_HOME/db-migrate.log" 2>&1 || { tail -30 "$AIRFLOW_HOME/db-migrate.log"; exit 1; }
POOL="$("$PY" -c 'import configparser,sys; c=configparser.ConfigParser(interpolation=None); c.read(sys.argv[1]); print(c.get("dlperf","pool",fallback="dlperf_nodes"), c.get("dlperf","pool_slots",fallback="1"))' "$CFG")"
"$AIRFLOW" pools set ${POOL} "dlperf trials (node exclusivity is enforced by leases too)" >/dev/null
echo "AIRFLOW_HOME=$AIRFLOW_HOME ready (config $CFG, pool ${POOL% *})"

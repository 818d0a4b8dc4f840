"""The deployment files of infra/, checked with the tools and schemas that run without Docker,
GPUs or a cluster (infra/README.md says what that leaves unproven).

tests/fixtures/compose-spec.json is the Compose Specification's JSON schema, the one the
`docker compose` CLI validates against (compose-spec project, Apache-2.0), vendored from the npm
package dclint 3.1.0 (schemas/compose.schema.json).
"""

import json
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
import pytest
import yaml

from flows import telemetry_defaults

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
COMPOSE = INFRA / "docker-compose.yml"
ENV_EXAMPLE = INFRA / ".env.example"
INIT_SCRIPT = INFRA / "postgres" / "init-databases.sh"
K8S_TEMPLATE = INFRA / "k8s" / "gpu-base-job-template.json"
DOCKERFILES = sorted((INFRA / "docker").glob("*.Dockerfile"))
ACCELERATE_CONFIGS = sorted((INFRA / "accelerate").glob("*.yaml"))
COMPOSE_SPEC = Path(__file__).parents[1] / "fixtures" / "compose-spec.json"
BUCKETS = {"mlflow", "acesql-artifacts", "acesql-dvc"}
TELEMETRY = telemetry_defaults()

# Compose's interpolation: $$, ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error},
# ${VAR?error}, ${VAR:+alt}, ${VAR+alt}, $VAR
VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))"
)


def worker_command(pool: str) -> list[str]:
    return ["prefect", "worker", "start", "--pool", pool, "--type", "process"]


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a Compose .env file; comments and blank lines skipped."""
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"{path.name}: not KEY=VALUE: {line!r}"
            env[key.strip()] = value.strip()
    return env


def strings(node):
    """Every string value of a loaded YAML document (mapping keys excluded, as Compose does)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def variables_used(text: str) -> set[str]:
    return {m["braced"] or m["plain"] for m in VARIABLE.finditer(text) if m["escaped"] is None}


def interpolate(node, env: dict[str, str]):
    """The document as Compose sees it with `env`; a missing required variable raises."""
    if isinstance(node, dict):
        return {key: interpolate(value, env) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate(value, env) for value in node]
    if not isinstance(node, str):
        return node

    def substitute(m: re.Match) -> str:
        if m["escaped"]:
            return "$"
        name = m["braced"] or m["plain"]
        value, op, arg = env.get(name), m["op"] or "", m["arg"]
        is_set = value is not None and (value != "" or not op.startswith(":"))
        if op.endswith("-"):
            return value if is_set else arg
        if op.endswith("?"):
            if not is_set:
                raise KeyError(f"{name}: {arg}")
            return value
        if op.endswith("+"):
            return arg if is_set else ""
        return value or ""

    return VARIABLE.sub(substitute, node)


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def env_example() -> dict[str, str]:
    return read_env_file(ENV_EXAMPLE)


@pytest.fixture(scope="module")
def compose_resolved(compose, env_example) -> dict:
    return interpolate(compose, env_example)


# --- docker-compose.yml ------------------------------------------------------------------


def test_interpolation_follows_compose_rules():
    env = {"SET": "v", "EMPTY": ""}
    assert interpolate("$$X ${SET} $SET ${NOPE:-d} ${EMPTY:-d} ${EMPTY-d}", env) == "$X v v d d "
    assert interpolate("${SET:+alt}${NOPE:+alt}", env) == "alt"
    with pytest.raises(KeyError, match="EMPTY: say so"):
        interpolate("${EMPTY:?say so}", env)
    assert variables_used("$$ESCAPED ${A:-x} $B") == {"A", "B"}


# the schema declares draft-07 (by a URL jsonschema does not recognise)
@pytest.mark.parametrize("form", ["as written", "interpolated"])
def test_compose_matches_compose_spec(form, compose, compose_resolved):
    schema = json.loads(COMPOSE_SPEC.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    document = compose if form == "as written" else compose_resolved
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft7Validator(schema).iter_errors(document)
    ]
    assert errors == []


def test_compose_spec_schema_rejects_a_broken_file():
    schema = json.loads(COMPOSE_SPEC.read_text())
    broken = {"services": {"db": {"image": "postgres:17", "depends_on": {"x": {"when": "up"}}}}}
    assert not jsonschema.Draft7Validator(schema).is_valid(broken)


def test_compose_runs_the_team_server(compose):
    services = compose["services"]
    assert {"postgres", "minio", "buckets", "prefect-server", "mlflow", "cpu-worker"} <= set(
        services
    )
    assert services["prefect-server"]["image"] == "prefecthq/prefect:3-python3.11"
    assert services["prefect-server"]["command"][:3] == ["prefect", "server", "start"]
    assert services["cpu-worker"]["command"][:7] == worker_command("cpu")
    mlflow = " ".join(services["mlflow"]["command"])
    assert "--backend-store-uri=postgresql://" in mlflow
    assert "--artifacts-destination=s3://mlflow/" in mlflow
    assert services["mlflow"]["environment"]["MLFLOW_S3_ENDPOINT_URL"] == "http://minio:9000"
    database_url = services["prefect-server"]["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"]
    assert database_url.startswith("postgresql+asyncpg://")


def test_compose_depends_on_defined_services(compose):
    services = compose["services"]
    for name, service in services.items():
        depends_on = service.get("depends_on", {})
        assert set(depends_on) <= set(services), f"{name} depends on an undefined service"
        for target, condition in depends_on.items():
            assert target != name
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in services[target], f"{name} waits on {target}'s health"
            if condition["condition"] == "service_completed_successfully":
                assert services[target].get("restart") == "no", f"{target} is not a one-shot"


def test_compose_long_running_services_have_healthchecks(compose):
    for name, service in compose["services"].items():
        if service.get("restart") != "no":
            assert "test" in service.get("healthcheck", {}), f"{name} has no healthcheck"


def test_compose_volumes_are_declared_or_exist(compose_resolved):
    declared = set(compose_resolved.get("volumes") or {})
    used = set()
    for name, service in compose_resolved["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0] if isinstance(volume, str) else volume.get("source")
            if source.startswith((".", "/", "~")):
                assert (INFRA / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in declared, f"{name} uses undeclared volume {source}"
                used.add(source)
    assert used == declared, "a declared volume is used by no service"


def test_compose_builds_existing_dockerfiles(compose):
    for name, service in compose["services"].items():
        if "build" in service:
            context = (INFRA / service["build"]["context"]).resolve()
            assert context == ROOT, f"{name} builds from {context}, not the repository root"
            assert (context / service["build"]["dockerfile"]).is_file()


def test_compose_variables_are_defined_in_env_example(compose, env_example):
    used = set().union(*(variables_used(s) for s in strings(compose)))
    assert used, "the compose file takes nothing from infra/.env"
    assert sorted(used - set(env_example)) == []


def test_env_example_holds_no_real_secrets(env_example):
    for key, value in env_example.items():
        if key.endswith(("PASSWORD", "SECRET_ACCESS_KEY")):
            assert value.startswith("change-me"), f"{key} looks like a real secret"


def test_compose_ports_bind_loopback(compose_resolved):
    published = []
    for name, service in compose_resolved["services"].items():
        for port in service.get("ports", []):
            host_ip = port.get("host_ip") if isinstance(port, dict) else port.rsplit(":", 2)[0]
            assert host_ip == "127.0.0.1", f"{name} publishes {port} beyond loopback"
            published.append(port)
    assert published


def test_compose_stops_on_each_missing_secret(compose, env_example):
    required = set().union(
        *({m["braced"] for m in VARIABLE.finditer(s) if m["op"] == ":?"} for s in strings(compose))
    )
    assert {"POSTGRES_PASSWORD", "MINIO_ROOT_PASSWORD", "S3_SECRET_ACCESS_KEY"} <= required
    for name in required:
        with pytest.raises(KeyError, match=name):
            interpolate(compose, {k: v for k, v in env_example.items() if k != name})


def run_bucket_script(compose, tmp_path, user_info: str) -> list[str]:
    """The `buckets` service's script under sh, with a stand-in `mc` that logs its arguments."""
    service = compose["services"]["buckets"]
    script = interpolate(service["command"][0], {})  # Compose turns $$ into $
    mc = tmp_path / "mc"
    mc.write_text(
        '#!/bin/sh\necho "$*" >> "$MC_LOG"\n'
        'if [ "$1 $2 $3" = "admin user info" ]; then echo "$MC_USER_INFO"; fi\n'
    )
    mc.chmod(0o755)
    log = tmp_path / "mc.log"
    log.write_text("")
    env = {
        "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
        "MC_LOG": str(log),
        "MC_USER_INFO": user_info,
        "MINIO_ROOT_USER": "root",
        "MINIO_ROOT_PASSWORD": "root-pw",
        "S3_ACCESS_KEY_ID": "acesql",
        "S3_SECRET_ACCESS_KEY": "s3-pw",
    }
    entrypoint = service["entrypoint"]
    subprocess.run([*entrypoint, script], env=env, check=True, timeout=30)
    return log.read_text().splitlines()


def test_bucket_script_creates_buckets_and_key(compose, tmp_path):
    calls = run_bucket_script(compose, tmp_path, user_info="AccessKey: acesql\nStatus: enabled")
    assert calls[0] == "alias set local http://minio:9000 root root-pw"
    made = {c.split("local/")[1] for c in calls if c.startswith("mb --ignore-existing local/")}
    assert made == BUCKETS
    assert "admin user add local acesql s3-pw" in calls
    assert calls[-1] == "admin policy attach local readwrite --user acesql"


def test_bucket_script_is_idempotent(compose, tmp_path):
    calls = run_bucket_script(
        compose, tmp_path, user_info="AccessKey: acesql\nPolicyName: readwrite"
    )
    assert not any(c.startswith("admin policy attach") for c in calls)


# --- postgres/init-databases.sh ------------------------------------------------------------

SUPERUSER_PASSWORD = "super-pw"
DB_PASSWORDS = {"prefect": "prefect-pw", "mlflow": "it's-mlflow"}  # a quote: SQL quoting holds


@pytest.fixture(scope="module")
def postgres_socket_dir():
    """A throwaway Postgres on a Unix socket (no TCP), password authentication only."""
    if not all(shutil.which(tool) for tool in ("initdb", "pg_ctl", "psql")):
        pytest.skip("PostgreSQL's initdb, pg_ctl and psql are not installed")
    owner = None
    if os.geteuid() == 0:  # Postgres refuses to run as root
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no postgres user to run Postgres as")
    # not pytest's tmp_path: the postgres user must be able to enter it
    root = Path(tempfile.mkdtemp(prefix="acesql-pg-"))
    password_file = root / "superuser-password"
    password_file.write_text(SUPERUSER_PASSWORD)
    as_owner = []
    if owner:
        for path in (root, password_file):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        as_owner = ["runuser", "-u", "postgres", "--"]
    data = root / "data"

    def run(*args):
        return subprocess.run([*as_owner, *args], check=True, capture_output=True, timeout=120)

    password_only = ["--auth=scram-sha-256", f"--pwfile={password_file}"]
    run("initdb", "-D", str(data), "-U", "postgres", *password_only)
    server_options = f"-c listen_addresses='' -k {shlex.quote(str(root))}"
    run("pg_ctl", "-D", str(data), "-l", str(root / "log"), "-w", "-o", server_options, "start")
    try:
        yield root
    finally:
        stop = [*as_owner, "pg_ctl", "-D", str(data), "-m", "immediate", "stop"]
        subprocess.run(stop, capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def psql(socket_dir, user, password, database, sql):
    env = {**os.environ, "PGHOST": str(socket_dir), "PGPASSWORD": password}
    return subprocess.run(
        ["psql", "-U", user, "-d", database, "-tAc", sql],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.fixture(scope="module")
def databases(postgres_socket_dir) -> Path:
    """The throwaway Postgres after init-databases.sh ran in it, as the image's entrypoint runs
    it; its socket folder."""
    env = {
        **os.environ,
        "PGHOST": str(postgres_socket_dir),
        "PGPASSWORD": SUPERUSER_PASSWORD,
        "POSTGRES_USER": "postgres",
        "PREFECT_DB_PASSWORD": DB_PASSWORDS["prefect"],
        "MLFLOW_DB_PASSWORD": DB_PASSWORDS["mlflow"],
    }
    subprocess.run(["bash", str(INIT_SCRIPT)], env=env, check=True, capture_output=True, timeout=60)
    return postgres_socket_dir


def test_init_script_creates_each_database_with_its_owner(databases):
    owner_sql = (
        "SELECT current_user, pg_get_userbyid(datdba) FROM pg_database "
        "WHERE datname = current_database()"
    )
    for name, password in DB_PASSWORDS.items():
        done = psql(databases, name, password, name, owner_sql)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"{name}|{name}"
        refused = psql(databases, name, "wrong", name, "SELECT 1")
        assert refused.returncode != 0 and "password authentication failed" in refused.stderr


@pytest.mark.external
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_prefect_migrates_its_database_as_its_own_role(databases, tmp_path):
    """Prefect's schema (pg_trgm included) goes in with the rights the init script gives."""
    url = f"postgresql+asyncpg://prefect:{DB_PASSWORDS['prefect']}@/prefect?host={databases}"
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path),
        "PREFECT_API_DATABASE_CONNECTION_URL": url,
    }
    command = [sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    query = "SELECT count(*) FROM information_schema.tables WHERE table_name = 'flow_run'"
    tables = psql(databases, "prefect", DB_PASSWORDS["prefect"], "prefect", query)
    assert tables.stdout.strip() == "1"


# --- Dockerfiles ---------------------------------------------------------------------------


def parse_dockerfile(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: continuation lines joined, comments dropped."""
    instructions, pending = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, arguments = (pending + line).partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    assert not pending, f"{path.name} ends inside a continued line"
    return instructions


def values(instructions, keyword) -> list[str]:
    return [arguments for name, arguments in instructions if name == keyword]


def test_dockerfile_parser_reads_continuations(tmp_path):
    dockerfile = tmp_path / "x.Dockerfile"
    dockerfile.write_text('# c\nFROM a:1\nRUN one \\\n    && two\n\nCMD ["x"]\n')
    assert parse_dockerfile(dockerfile) == [
        ("FROM", "a:1"),
        ("RUN", "one  && two"),
        ("CMD", '["x"]'),
    ]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_essentials(dockerfile):
    instructions = parse_dockerfile(dockerfile)
    assert instructions[0][0] == "FROM"
    users = values(instructions, "USER")
    assert users and users[-1].isdigit() and int(users[-1]) > 0, (
        "must end as a numeric non-root user"
    )
    cmd = json.loads(values(instructions, "CMD")[-1])  # exec form: signals reach the process
    assert isinstance(cmd, list) and cmd
    for arguments in values(instructions, "COPY"):
        parts = arguments.split()
        assert not any(p.startswith("--from") for p in parts)
        for source in [p for p in parts if not p.startswith("--")][:-1]:
            assert (ROOT / source).exists(), f"{dockerfile.name} copies missing {source}"
    env = " ".join(values(instructions, "ENV"))
    assert "MLFLOW_DISABLE_TELEMETRY=true" in env


def _telemetry_keys_set(pairs: dict[str, str]) -> dict[str, str]:
    return {k: str(v) for k, v in pairs.items() if k in TELEMETRY}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_carry_telemetry_env_as_it_is(dockerfile):
    """An image cannot include telemetry.env: what it sets of it must be the file's values, and
    an image that runs flows (a worker) sets all of it."""
    words = shlex.split(" ".join(values(parse_dockerfile(dockerfile), "ENV")))
    env = _telemetry_keys_set(dict(w.split("=", 1) for w in words if "=" in w))
    assert env == {k: TELEMETRY[k] for k in env}
    if "worker" in dockerfile.name:
        assert env == TELEMETRY


def test_compose_services_carry_telemetry_env_as_it_is(compose):
    for name, service in compose["services"].items():
        env = _telemetry_keys_set(service.get("environment") or {})
        assert env == {k: TELEMETRY[k] for k in env}, name


@pytest.mark.parametrize(
    ("name", "base", "pool"),
    [
        ("cpu-worker.Dockerfile", "python:3.11-slim", "cpu"),
        ("gpu-worker.Dockerfile", "nvidia/cuda:", "gpu"),
    ],
)
def test_worker_images(name, base, pool):
    instructions = parse_dockerfile(INFRA / "docker" / name)
    assert values(instructions, "FROM")[0].startswith(base)
    assert json.loads(values(instructions, "CMD")[-1])[:7] == worker_command(pool)
    assert any("-c constraints.txt ." in run for run in values(instructions, "RUN"))


def test_cpu_worker_installs_the_cpu_torch_before_the_project():
    runs = values(parse_dockerfile(INFRA / "docker" / "cpu-worker.Dockerfile"), "RUN")
    torch = next(i for i, r in enumerate(runs) if "torch==2.13.0" in r)
    assert "--index-url https://download.pytorch.org/whl/cpu" in runs[torch]
    project = next(i for i, r in enumerate(runs) if "pip install -c constraints.txt ." in r)
    assert torch < project


def test_gpu_image_keeps_vllm_apart_from_prefect():
    """The vLLM environment's requirements, computed by the Dockerfile's own command from
    pyproject.toml: the project's dependencies less Prefect and DVC, plus the vllm extra."""
    from packaging.requirements import Requirement

    runs = values(parse_dockerfile(INFRA / "docker" / "gpu-worker.Dockerfile"), "RUN")
    vllm_run = next(r for r in runs if "/opt/vllm" in r)
    assert "--no-deps ." in vllm_run, "the project goes in without its dependencies"
    snippet = re.search(r"python -c '([^']+)'", vllm_run)[1]
    done = subprocess.run(
        [sys.executable, "-c", snippet], cwd=ROOT, capture_output=True, text=True, check=True
    )
    names = {Requirement(line).name for line in done.stdout.splitlines()}
    assert "vllm" in names and not names & {"prefect", "dvc"}
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    expected = {Requirement(d).name for d in project["dependencies"]} - {"prefect", "dvc"}
    assert names == expected | {"vllm"}
    default_env = next(r for r in runs if "/opt/venv" in r)
    assert "-c constraints.txt ." in default_env


# --- k8s/gpu-base-job-template.json ------------------------------------------------------


@pytest.fixture(scope="module")
def job_template() -> dict:
    return json.loads(K8S_TEMPLATE.read_text())


def render_job(template: dict, overrides: dict | None = None) -> dict:
    """The job configuration as a Prefect worker fills it in: variable defaults (None ones
    left out, which drops their keys), overridden by a deployment's job variables."""
    from prefect.utilities.templating import apply_values

    defaults = {
        name: spec["default"]
        for name, spec in template["variables"]["properties"].items()
        if spec.get("default") is not None
    }
    return apply_values(template["job_configuration"], {**defaults, **(overrides or {})})


def test_job_template_passes_prefect_validation(job_template):
    from prefect.server.schemas.actions import WorkPoolCreate

    pool = WorkPoolCreate(name="gpu", type="kubernetes", base_job_template=job_template)
    assert pool.base_job_template["job_configuration"]["job_manifest"]["kind"] == "Job"
    undeclared = json.loads(json.dumps(job_template))
    del undeclared["variables"]["properties"]["gpu_count"]
    with pytest.raises(ValueError, match="gpu_count"):
        WorkPoolCreate(name="gpu", type="kubernetes", base_job_template=undeclared)


def test_job_template_variables_are_a_json_schema_its_defaults_meet(job_template):
    variables = job_template["variables"]
    jsonschema.Draft7Validator.check_schema(variables)
    defaults = {k: v["default"] for k, v in variables["properties"].items() if "default" in v}
    jsonschema.Draft7Validator(variables).validate(defaults)


def test_job_template_requests_gpus_through_a_variable(job_template):
    manifest = job_template["job_configuration"]["job_manifest"]
    limits = manifest["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    placeholder = re.fullmatch(r"\{\{ *(\w+) *\}\}", limits["nvidia.com/gpu"])
    assert placeholder, "the GPU count must be a template variable"
    gpu_count = job_template["variables"]["properties"][placeholder[1]]
    assert gpu_count["type"] == "integer" and gpu_count["default"] == 1


def test_job_renders_to_a_gpu_job(job_template):
    configuration = render_job(job_template)
    job = configuration["job_manifest"]
    assert "{{" not in json.dumps(configuration), "a placeholder was left unfilled"
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["name"] == "prefect-job" and container["image"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert pod["nodeSelector"] and pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert {v["name"] for v in pod["volumes"]} == set(mounts)
    assert configuration["env"]["ACESQL_PROJECT_DIR"] == mounts["project"]
    assert configuration["env"]["MLFLOW_TRACKING_URI"].startswith("http")
    assert container["envFrom"][0]["secretRef"]["name"]


def test_job_takes_a_deployments_overrides(job_template):
    configuration = render_job(job_template, {"gpu_count": 8, "memory_limit": "200Gi"})
    container = configuration["job_manifest"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8, "memory": "200Gi"}


# --- accelerate/ -------------------------------------------------------------------------


def launch_args(config: Path):
    """The arguments `accelerate launch --config_file config -m acesql.stages.sft` runs with."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    parsed = launch_command_parser().parse_args(
        ["--config_file", str(config), "-m", "acesql.stages.sft"]
    )
    args, _, _ = _validate_launch_command(parsed)
    return args


@pytest.mark.parametrize("config", ACCELERATE_CONFIGS, ids=lambda p: p.name)
def test_accelerate_config_loads(config):
    from accelerate.commands.config.config_args import ClusterConfig

    loaded = ClusterConfig.from_yaml_file(config)
    assert loaded.mixed_precision == "bf16" and loaded.num_machines == 1
    assert launch_args(config).mixed_precision == "bf16"


def test_single_gpu_config_runs_one_process():
    from accelerate.utils.launch import prepare_simple_launcher_cmd_env

    args = launch_args(INFRA / "accelerate" / "single_gpu.yaml")
    assert not args.use_fsdp and args.num_processes == 1
    command, env = prepare_simple_launcher_cmd_env(args)
    assert command[-2:] == ["-m", "acesql.stages.sft"]
    assert env["CUDA_VISIBLE_DEVICES"] == "0"


def test_fsdp_config_builds_accelerates_fsdp_plugin(monkeypatch):
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.launch import prepare_multi_gpu_env

    args = launch_args(INFRA / "accelerate" / "multi_gpu_fsdp.yaml")
    assert args.use_fsdp and args.num_processes > 1
    for key, value in prepare_multi_gpu_env(args).items():
        monkeypatch.setenv(key, value)
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2
    assert plugin.reshard_after_forward is True
    assert plugin.state_dict_type.name == "SHARDED_STATE_DICT"

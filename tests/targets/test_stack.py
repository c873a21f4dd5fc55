"""Stack targets before anything starts: a template that names no replica, a config that does not parse, a missing
file or command, a secret not set are each refused with the file and what to do; secrets reach only the processes
that list them and no file the run writes."""

import os
import sys

import pytest

from chaos.experiment.loader import ExperimentError
from chaos.experiment.model import load_target
from chaos.targets.base import TargetError, spawn
from chaos.targets.stack import StackTarget

GOOD = """model_list:
{%- for r in replicas %}
  - model_name: {{ model }}
    litellm_params: {model: "openai/{{ model }}", api_base: "{{ r.api_base }}"}
{%- endfor %}
"""


def _write(tmp_path, template: str = GOOD, gateway_extra: str = "", replica_extra: str = "", name="gw.yaml.j2"):
    (tmp_path / name).write_text(template)
    t = tmp_path / "stack.yaml"
    t.write_text(f"""kind: stack
model: m
replicas: 2
replica:
  command: ["{{python}}", -m, http.server, "{{port}}"]
{replica_extra}gateway:
  command: ["{{python}}", -m, http.server, "{{port}}", --directory, "{{config}}"]
  config: {name}
{gateway_extra}""")
    return str(t)


def _problems(path) -> str:
    with pytest.raises(ExperimentError) as e:
        load_target(path)
    return str(e.value)


def test_a_good_stack_loads_and_renders_each_replica_through_its_front(tmp_path):
    spec, _ = load_target(_write(tmp_path))
    t = StackTarget(spec, str(tmp_path))
    t.render_config()
    text = open(t.config_path).read()
    assert t.config_path.endswith("gateway-config.yaml")
    for inst in t.instances:
        assert f'api_base: "{inst.url}/v1"' in text
    assert [i.id for i in t.all_instances()] == ["r0", "r1", "gw"]
    assert t.command(t.gateway)[3] == str(t.gateway.port) and t.command(t.gateway)[0] == sys.executable
    assert t.command(t.gateway)[-1] == t.config_path


def test_a_template_that_names_no_replica_is_refused_with_its_file(tmp_path):
    said = _problems(_write(tmp_path, "model_list: []\n"))
    assert "stack.yaml:8" in said and "gw.yaml.j2" in said and "names no replica" in said


def test_a_template_that_names_one_replica_of_two_says_which_is_missing(tmp_path):
    only_first = GOOD.replace("{%- for r in replicas %}", "{%- for r in replicas[:1] %}")
    assert "names not r1" in _problems(_write(tmp_path, only_first))


def test_a_config_that_does_not_parse_says_the_rendered_line(tmp_path):
    bad = GOOD + "router_settings: {unclosed: [\n"
    said = _problems(_write(tmp_path, bad))
    assert "the rendered config does not parse (rendered line" in said


def test_a_template_with_a_syntax_error_names_its_line(tmp_path):
    said = _problems(_write(tmp_path, GOOD + "{% for x in %}\n"))
    assert "gw.yaml.j2:6" in said and "does not parse" in said


def test_a_missing_model_file_and_command_say_how_to_build_them(tmp_path):
    extra = "  files: [/nonexistent/tiny.gguf]\n  build: scripts/engines.sh llama-cpp\n"
    said = _problems(_write(tmp_path, replica_extra=extra))
    assert "/nonexistent/tiny.gguf does not exist; build it with scripts/engines.sh llama-cpp" in said
    t = tmp_path / "nocmd.yaml"
    t.write_text("kind: stack\nmodel: m\nreplica:\n  command: [.engines/nothing/bin/serve, '{port}']\n"
                 "  build: scripts/engines.sh all\n")
    assert ".engines/nothing/bin/serve does not exist; build it with scripts/engines.sh all" in _problems(str(t))


def test_a_secret_that_is_not_set_stops_the_target_before_it_starts(tmp_path, monkeypatch):
    monkeypatch.delenv("CHAOS_TEST_GW_KEY", raising=False)
    spec, _ = load_target(_write(tmp_path, gateway_extra="  secrets: [CHAOS_TEST_GW_KEY]\n"))
    with pytest.raises(TargetError, match="needs CHAOS_TEST_GW_KEY in the environment"):
        StackTarget(spec, str(tmp_path))


def test_a_rendered_config_holding_a_secret_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("CHAOS_TEST_GW_KEY", "sk-very-secret-value")
    leaky = GOOD + "general_settings: {master_key: sk-very-secret-value}\n"
    spec, _ = load_target(_write(tmp_path, leaky, gateway_extra="  secrets: [CHAOS_TEST_GW_KEY]\n"))
    t = StackTarget(spec, str(tmp_path))
    with pytest.raises(TargetError, match=r"holds the value of \$CHAOS_TEST_GW_KEY.*os.environ/CHAOS_TEST_GW_KEY"):
        t.render_config()
    assert not os.path.exists(t.config_path)


def test_secrets_reach_only_the_part_that_lists_them(tmp_path, monkeypatch):
    monkeypatch.setenv("CHAOS_TEST_GW_KEY", "gw-secret")
    spec, _ = load_target(_write(tmp_path, gateway_extra="  secrets: [CHAOS_TEST_GW_KEY]\n"))
    t = StackTarget(spec, str(tmp_path))
    show = [sys.executable, "-c", "import os; print(repr(os.environ.get('CHAOS_TEST_GW_KEY')))"]
    for part, expected in ((t.replica_part, "None"), (t.gateway_part, "'gw-secret'")):
        env, withheld = t._env(part)
        log = tmp_path / f"{part.engine}-{expected[:3]}.log"
        proc, _ = spawn(show, str(log), env, withhold=withheld)
        assert proc.wait(30) == 0
        assert log.read_text().strip() == expected


def test_a_command_without_port_or_a_config_it_never_reads_is_refused(tmp_path):
    t = tmp_path / "s.yaml"
    (tmp_path / "gw.yaml.j2").write_text(GOOD)
    t.write_text('kind: stack\nmodel: m\nreplica:\n  command: ["{python}", -m, http.server]\n'
                 'gateway:\n  command: ["{python}", -m, http.server, "{port}"]\n  config: gw.yaml.j2\n')
    said = _problems(str(t))
    assert "replica.command: the command must contain {port}" in said
    assert "gateway.command: config: and {config} in the command go together" in said


def test_a_links_proxy_is_spawned_without_the_stacks_secrets(tmp_path, monkeypatch):
    """LiteLLM's master key is the gateway's: the LLM proxy on a hop forwards headers and gets none of it."""
    from types import SimpleNamespace

    import psutil

    from chaos.targets.base import Instance
    from chaos.targets.links import L7, Links

    monkeypatch.setenv("CHAOS_TEST_GW_KEY", "gw-secret")
    monkeypatch.setenv("CHAOS_TEST_OTHER", "kept")
    up = [Instance(0, "r0", "http://127.0.0.1:9", 9)]
    target = SimpleNamespace(instances=up, gateway=None, all_instances=lambda: up, fault_token="t",
                             secrets=("CHAOS_TEST_GW_KEY",), spec=SimpleNamespace(settings={}))
    links = Links(target, {"r0": {L7}}, str(tmp_path), run_tag="s")
    try:
        links.up()
        env = psutil.Process(links.processes[0].pid).environ()
        assert "CHAOS_TEST_GW_KEY" not in env and env.get("CHAOS_TEST_OTHER") == "kept"
    finally:
        links.down(grace=2)


def test_a_gateway_may_take_its_port_from_its_config_and_numbers_are_words(tmp_path):
    """nginx listens where its config says: {{ port }} in the template stands for {port} in the command; a
    command item that is a number (a variable like ${CONTEXT}) is passed as its text."""
    (tmp_path / "gw.conf.j2").write_text("listen {{ port }};\n{% for r in replicas %}server {{ r.host }}:{{ r.port }};\n"
                                         "{% endfor %}")
    t = tmp_path / "s.yaml"
    t.write_text('kind: stack\nmodel: m\nreplicas: 2\nreplica:\n  command: ["{python}", -m, http.server, "{port}", '
                 '-c, 1024]\ngateway:\n  command: ["{python}", -m, http.server, --directory, "{config}"]\n'
                 '  config: gw.conf.j2\n')
    spec, _ = load_target(str(t))
    target = StackTarget(spec, str(tmp_path))
    target.render_config()
    assert f"listen {target.gateway.port};" in open(target.config_path).read()
    assert target.command(target.instances[0])[-2:] == ["-c", "1024"]

    (tmp_path / "gw.conf.j2").write_text("{% for r in replicas %}server {{ r.host }}:{{ r.port }};\n{% endfor %}")
    said = _problems(str(t))
    assert "gateway.command: the command must contain {port}" in said and "or its config template" in said


def test_a_gateway_config_its_own_check_refuses_is_refused_before_anything_starts(tmp_path):
    """`check:` is the gateway's own test of the rendered config (nginx -t): what it says is the error."""
    checker = tmp_path / "check.py"
    checker.write_text("import sys\ntext = open(sys.argv[1]).read()\n"
                       "if 'bogus' in text:\n    print('unknown directive \"bogus\" in ' + sys.argv[1] + ':2')\n"
                       "    sys.exit(1)\n")
    good = "{% for r in replicas %}server {{ r.host }}:{{ r.port }};\n{% endfor %}"
    path = _write(tmp_path, good, gateway_extra=f'  check: ["{{python}}", "{checker}", "{{config}}"]\n',
                  name="gw.conf.j2")
    load_target(path)
    (tmp_path / "gw.conf.j2").write_text(good + "bogus on;\n")
    said = _problems(path)
    assert "gateway.check" in said and "gw.conf.j2: the rendered config fails its check" in said
    assert 'unknown directive "bogus" in the rendered config:2' in said and "exited 1" in said


def test_bundled_replicas_behind_any_gateway_are_counted_in_bytes(tmp_path):
    """LiteLLM's model list says owned_by openai, hiding the bundled server's exact byte count from the load's
    auto: the stack knows its replicas (an estimate there sent 2,392-token prompts asked as 600)."""
    spec, _ = load_target(_write(tmp_path, replica_extra="  engine: reference\n"))
    assert StackTarget(spec, str(tmp_path)).tokenizer == "byte"
    spec, _ = load_target(_write(tmp_path, replica_extra="  engine: llama.cpp\n"))
    assert StackTarget(spec, str(tmp_path)).tokenizer == "auto"


def test_an_env_value_a_variable_made_a_boolean_or_a_number_reaches_the_process_as_text(tmp_path):
    """`DISABLE_AIOHTTP_TRANSPORT: ${LITELLM_HTTPX:-false}`: the variable's false is YAML's boolean by then."""
    from chaos.targets.stack import Part

    part = Part.from_dict({"command": ["x", "{port}"], "env": {"A": True, "B": False, "C": 3, "D": "text"}})
    assert part.env == {"A": "true", "B": "false", "C": "3", "D": "text"}
    spec, _ = load_target(_write(tmp_path, gateway_extra="  env:\n    FLAG: ${FLAG:-false}\n"))
    assert StackTarget(spec, str(tmp_path)).gateway_part.env == {"FLAG": "false"}

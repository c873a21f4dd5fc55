"""chaos/export/chaosmesh.py: each fault type mapped to its Chaos Mesh object with the fields the docs give, or
left out with the reason; and every fault type of FAULT_TYPES is one or the other."""

import base64
import json

import pytest

from chaos.errors import InputError
from chaos.export.chaosmesh import LEFT_OUT, MAPPERS, Injection, Left, map_faults
from chaos.faults import FAULT_TYPES

from .conftest import config

REPLICAS = {"namespaces": ["ns"], "labelSelectors": {"app": "llm"}}


def one(make_exp, fault, cfg=None, **target):
    exp = make_exp([{"at": "10s", **fault}], target=target or None)
    done, left = map_faults(exp, cfg or config())
    return (done or left)[0]


def test_every_fault_type_is_mapped_or_left_out_with_a_reason_never_both():
    assert set(MAPPERS) | set(LEFT_OUT) == set(FAULT_TYPES)
    assert not set(MAPPERS) & set(LEFT_OUT)
    assert all(why for why, _ in LEFT_OUT.values())


def test_kill_instance_is_a_pod_kill_of_one_replica_held_for_restart_after(make_exp):
    inj = one(make_exp, {"type": "kill_instance", "instance": "r1", "restart_after": "5s"})
    assert isinstance(inj, Injection) and inj.kind == "PodChaos" and (inj.at, inj.lasts) == (10, 5)
    assert inj.spec == {"selector": REPLICAS, "mode": "one", "action": "pod-kill", "gracePeriod": 0}
    assert any("restart_after (5s) has no counterpart" in n for n in inj.notes)


def test_kill_with_sigterm_gets_a_grace_period_and_a_count_a_fixed_number(make_exp):
    inj = one(make_exp, {"type": "kill_instance", "instance": 0, "count": 2, "signal": "SIGTERM"})
    assert inj.spec["gracePeriod"] == 30 and (inj.spec["mode"], inj.spec["value"]) == ("fixed", "2")
    assert inj.lasts == 50  # no restart_after: the rest of the 60 s load


def test_an_instance_pinned_to_a_pod_or_a_label_is_that_pod(make_exp):
    pod = one(make_exp, {"type": "kill_instance", "instance": "r1"}, config(instances=["r1=llm-1"]))
    assert pod.spec["selector"] == {"pods": {"ns": ["llm-1"]}} and pod.spec["mode"] == "all"
    lab = one(make_exp, {"type": "kill_instance", "instance": "r1"},
              config(instances=["r1=statefulset.kubernetes.io/pod-name=llm-1"]))
    assert lab.spec["selector"] == {"namespaces": ["ns"],
                                    "labelSelectors": {"statefulset.kubernetes.io/pod-name": "llm-1"}}


def test_a_backup_without_instance_is_refused_naming_the_flag(make_exp):
    target = {"kind": "reference", "replicas": 2, "gateway": {"backup": {"replicas": 1, "preset": "tiny"}}}
    with pytest.raises(InputError, match=r"b0.*--instance b0=POD"):
        one(make_exp, {"type": "pause_instance", "instance": "b0", "duration": "5s"}, **target)


def test_pause_is_every_packet_dropped_or_with_pause_as_a_pod_failure(make_exp):
    fault = {"type": "pause_instance", "instance": "r0", "duration": "7s"}
    inj = one(make_exp, fault)
    assert inj.kind == "NetworkChaos" and inj.lasts == 7
    assert inj.spec["action"] == "loss" and inj.spec["loss"] == {"loss": "100", "correlation": "0"}
    assert inj.spec["direction"] == "to" and "target" not in inj.spec
    failure = one(make_exp, fault, config(pause_as="pod-failure"))
    assert failure.kind == "PodChaos" and failure.spec["action"] == "pod-failure" and "duration" not in failure.spec


def test_latency_is_a_netem_delay_between_the_replica_and_the_gateway_when_it_is_pinned(make_exp):
    fault = {"type": "latency", "link": "r1", "latency": "200ms", "jitter": "100ms", "duration": "15s"}
    inj = one(make_exp, fault, config(instances=["gw=app=gateway"]))
    assert inj.kind == "NetworkChaos" and inj.lasts == 15
    assert inj.spec["delay"] == {"latency": "200ms", "correlation": "0", "jitter": "100ms"}
    assert inj.spec["direction"] == "to"  # downstream: what r1 sends back
    assert inj.spec["target"] == {"selector": {"namespaces": ["ns"], "labelSelectors": {"app": "gateway"}},
                                  "mode": "all"}
    up = one(make_exp, {**fault, "stream": "upstream"}, config(instances=["gw=app=gateway"]))
    assert up.spec["direction"] == "from"
    alone = one(make_exp, {**fault, "stream": "upstream"})
    assert alone.spec["direction"] == "to" and "target" not in alone.spec  # from needs a target
    assert any("upstream" in n for n in alone.notes)


def test_the_client_link_targets_the_load_s_worker_pods(make_exp):
    inj = one(make_exp, {"type": "latency", "latency": "50ms"})
    assert inj.spec["mode"] == "all" and inj.spec["selector"] == REPLICAS
    assert inj.spec["target"]["selector"]["labelSelectors"] == {"app.kubernetes.io/component": "locust-worker",
                                                                "llm-chaos.io/experiment": "t-exp"}


def test_bandwidth_is_tbf_in_kilobits_with_a_limit_and_a_buffer(make_exp):
    inj = one(make_exp, {"type": "bandwidth", "rate": 100})  # KB/s
    assert inj.spec["action"] == "bandwidth"
    assert inj.spec["bandwidth"] == {"rate": "800kbit", "limit": 100_000, "buffer": 10_000}
    assert isinstance(one(make_exp, {"type": "bandwidth", "rate": 0}), Left)


def test_timeout_is_loss_and_link_down_a_partition(make_exp):
    t = one(make_exp, {"type": "timeout", "link": "r1", "timeout": 0, "stream": "upstream"})
    assert t.spec["action"] == "loss" and t.spec["loss"]["loss"] == "100"
    down = one(make_exp, {"type": "link_down", "duration": "5s"})
    assert down.spec["action"] == "partition" and down.spec["direction"] == "both" and "target" in down.spec


def test_a_share_of_connections_has_no_chaos_mesh_counterpart(make_exp):
    left = one(make_exp, {"type": "latency", "latency": "50ms", "toxicity": "50%"})
    assert isinstance(left, Left) and "toxicity" in left.why and left.beside


def test_http_error_replaces_the_answer_with_the_llm_proxy_s_error(make_exp):
    inj = one(make_exp, {"type": "http_error", "status": 429, "retry_after": "2s", "duration": "15s"},
              config(port=8080))
    s = inj.spec
    assert inj.kind == "HTTPChaos" and (s["target"], s["port"], s["path"], s["method"]) == ("Response", 8080,
                                                                                           "/v1/*", "POST")
    assert s["replace"]["code"] == 429 and s["replace"]["headers"]["Retry-After"] == "2"
    body = json.loads(base64.b64decode(s["replace"]["body"]))
    assert body["error"]["code"] == "rate_limit_exceeded" and body["error"]["type"] == "requests"


def test_http_faults_on_a_share_or_a_count_of_requests_are_left_out(make_exp):
    share = one(make_exp, {"type": "http_error", "status": 429, "probability": "30%"})
    assert isinstance(share, Left) and "probability" in share.why
    counted = one(make_exp, {"type": "drop_connection", "count": 3})
    assert isinstance(counted, Left) and "count" in counted.why


def test_abort_delay_and_hang_are_httpchaos_on_the_request(make_exp):
    assert one(make_exp, {"type": "drop_connection"}).spec["abort"] is True
    reset = one(make_exp, {"type": "reset_peer"})
    assert reset.spec["abort"] is True and reset.spec["target"] == "Request"
    assert isinstance(one(make_exp, {"type": "reset_peer", "timeout": "1s"}), Left)
    delay = one(make_exp, {"type": "delay_request", "delay": "1500ms"})
    assert (delay.spec["target"], delay.spec["delay"]) == ("Request", "1500ms")
    assert one(make_exp, {"type": "hang", "max": "30s"}).spec["delay"] == "30s"


def test_first_token_delay_maps_only_before_the_headers(make_exp):
    before = one(make_exp, {"type": "first_token_delay", "delay": "2s", "where": "before_headers"})
    assert (before.spec["target"], before.spec["delay"]) == ("Response", "2s")
    assert isinstance(one(make_exp, {"type": "first_token_delay", "delay": "2s"}), Left)


@pytest.mark.parametrize("fault", [{"type": "stream_stall", "after_tokens": 4, "stall_for": "5s"},
                                   {"type": "garble_text"}, {"type": "token_delay", "delay": "50ms"},
                                   {"type": "abnormal_inputs", "cases": ["special"]}])
def test_stream_content_and_input_faults_are_left_out_to_run_beside(make_exp, fault):
    left = one(make_exp, fault)
    assert isinstance(left, Left) and left.beside and left.why == LEFT_OUT[fault["type"]][0]


def test_server_hooks_are_left_out_and_cannot_run_beside(make_exp):
    left = one(make_exp, {"type": "server_hook", "step_delay_ms": 100, "duration": "5s"})
    assert isinstance(left, Left) and not left.beside and "reference server" in left.why


def test_steps_get_unique_names_that_never_take_the_entry_s(make_exp):
    exp = make_exp([{"type": "kill_instance", "at": "1s", "name": "t-exp"},
                    {"type": "kill_instance", "at": "2s", "name": "T_EXP"}])
    done, _ = map_faults(exp, config())
    assert len({d.step for d in done} | {"t-exp"}) == 3


def test_the_docs_name_every_fault_type():
    import pathlib

    text = (pathlib.Path(__file__).parents[2] / "docs" / "export.md").read_text()
    assert [t for t in FAULT_TYPES if f"`{t}`" not in text] == []
    assert "No Kubernetes cluster ran these resources here" in text and "2.8.3" in text

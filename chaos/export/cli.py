"""`chaos export EXPERIMENT --to chaos-mesh`: an experiment as Chaos Mesh objects and a Locust run in a cluster."""

from __future__ import annotations

from ..errors import handled

EPILOG = """examples:
  chaos export experiments/kill-instance.yaml --to chaos-mesh --namespace llm --service vllm
  chaos export experiments/kill-instance.yaml --to chaos-mesh --service vllm --instance r1=vllm-1
        # r1 is the StatefulSet's pod vllm-1 (without --instance: any one pod of --selector)
  chaos export experiments/network-jitter.yaml --to chaos-mesh --service gateway \\
        --selector app.kubernetes.io/name=vllm --instance gw=app.kubernetes.io/name=gateway
  chaos export experiments/all-primaries-down.yaml --to chaos-mesh --service llm --instance b0=app=llm-backup
  chaos export experiments/packet-loss.yaml --to chaos-mesh --service llm --instance gw=app=gateway \
        --instance r1=llm-1   # host node-b is r1's pod, its peer edge the gateway's pods
  chaos export experiments/kill-instance.yaml --to chaos-mesh --service vllm --schedule "0 3 * * 1"
        # a weekly game day: the faults as a Schedule, the load as CronJobs, Mondays 03:00

Writes into --out (exports/NAME-chaos-mesh/ unless given): load/ (a ConfigMap with the load's config, a Service and
the Locust master and workers as Jobs), chaos/ (the faults as a Chaos Mesh Workflow: each waits for its `at`,
then lasts its duration; a Schedule of it with --schedule), README.md (how to apply it, and what each fault
became), and for what Chaos Mesh cannot inject (stream and content faults of the LLM proxy, the Toxiproxy toxics
without a counterpart, abnormal inputs) NOT-EXPORTED.md with the reason and beside.yaml, the same faults as an
experiment `chaos run` drives through `kubectl port-forward`. An instance the experiment names (r0, r1; b0, gw)
is any one pod of --selector unless --instance pins it; a host of the target's hosts: (a kernel fault's) is the
pods of the instances on it. No cluster runs here: every object is validated against schemas written from Chaos
Mesh 2.8.3's CRDs and documentation before anything is written (docs/export.md).
Exit codes: 0 written, 2 an invalid experiment or flag (nothing written)."""


def register(sub, formatter) -> None:
    p = sub.add_parser("export", help="write an experiment as Chaos Mesh resources and a Locust job for Kubernetes",
                       formatter_class=formatter, epilog=EPILOG,
                       description="Write an experiment's faults as Chaos Mesh objects (PodChaos, NetworkChaos, "
                                   "HTTPChaos in a Workflow) and its load as a distributed Locust run, for a "
                                   "service in a Kubernetes cluster; list what has no Chaos Mesh counterpart "
                                   "and how to run it beside.")
    p.add_argument("experiment", help="experiment file")
    p.add_argument("--to", required=True, choices=["chaos-mesh"], help="what to write (only chaos-mesh)")
    p.add_argument("--var", action="append", default=[], metavar="NAME=VALUE", help="set an experiment variable")
    g = p.add_argument_group("the service in the cluster")
    g.add_argument("--service", help="the Kubernetes Service in front of the pods (default: the target's name): "
                                     "the load sends to it, and the faults run beside port-forward it")
    g.add_argument("--namespace", default="default", help="the namespace of the service's pods, and of every "
                                                          "object written")
    g.add_argument("--selector", action="append", default=[], metavar="KEY=VALUE",
                   help="a label of the replicas' pods (repeatable; default app=SERVICE)")
    g.add_argument("--instance", action="append", default=[], metavar="ID=POD|ID=KEY=VALUE",
                   help="where an instance the experiment names runs: a pod's name, or a label (repeatable); "
                        "needed for a backup (b0) or the gateway (gw); a kernel fault's host is its instances' pods")
    g.add_argument("--port", type=int, default=8000, help="the port the pods and the Service listen on "
                                                          "(HTTPChaos proxies it)")
    g.add_argument("--url", help="the base URL the load's pods send to (default http://SERVICE.NAMESPACE.svc:PORT/v1)")
    g.add_argument("--model", help="the model the load asks for (default: the target file's)")
    g = p.add_argument_group("the load and the schedule")
    g.add_argument("--image", help="an image with this llm-chaos installed, for the Locust pods "
                                   "(default llm-chaos:VERSION)")
    g.add_argument("--workers", type=int, default=2, help="Locust workers")
    g.add_argument("--api-key-secret", metavar="NAME", help="the Secret with the target's api_key_env as a key "
                                                            "(default SERVICE-api-key)")
    g.add_argument("--schedule", metavar="CRON", help='a game day on this cron schedule, e.g. "0 3 * * 1"')
    g.add_argument("--pause-as", choices=["loss", "pod-failure"], default="loss",
                   help="pause_instance as every packet of the pod dropped (a frozen process, as clients see it) "
                        "or as Chaos Mesh's pod-failure (the pod down)")
    g.add_argument("--local-port", type=int, default=8000, help="the port-forward's local port, for beside.yaml")
    p.add_argument("--out", help="the folder to write (default exports/NAME-chaos-mesh/); an earlier export there "
                                 "is replaced")
    p.set_defaults(func=cmd_export)


@handled
def cmd_export(a) -> int:
    from ..experiment.model import load_experiment
    from ..experiment.variables import cli_vars
    from .bundle import build, default_out, write
    from .config import ExportConfig, Placement
    from .kube import label, object_name
    from .readme import NOT_RUN, what
    from .beside import how

    exp = load_experiment(a.experiment, cli_vars(a.var))
    instances = dict(Placement.parse(text) for text in a.instance)
    selector = dict(label(text, "--selector") for text in a.selector)
    cfg = ExportConfig(service=a.service or object_name(exp.target.name), namespace=a.namespace, selector=selector,
                       instances=instances, port=a.port, url=a.url, model=a.model, workers=a.workers,
                       api_key_secret=a.api_key_secret, schedule=a.schedule, pause_as=a.pause_as,
                       local_port=a.local_port, **({"image": a.image} if a.image else {}))
    out = a.out or default_out(exp)
    bundle = build(exp, cfg, out)
    files = write(bundle)
    print(f"wrote {out}/: {', '.join(files)}")
    for inj in bundle.injections:
        print(f"  exported: {inj.fault} ({inj.type} at {inj.at:g}s) -> {what(inj)}")
    for x in bundle.left:
        print(f"  not exported: {x.fault} ({x.type}): {x.why}\n    run it beside: {how(exp, cfg, x, out)}")
    print(NOT_RUN)
    print(f"next: {out}/README.md")
    return 0

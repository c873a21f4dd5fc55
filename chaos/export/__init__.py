"""`chaos export`: an experiment as resources for a Kubernetes cluster, written, never applied.

The faults become Chaos Mesh objects in a Workflow (chaos.export.chaosmesh maps each fault, chaos.export.workflow
places them in time), the load a distributed Locust run (chaos.export.locust); what Chaos Mesh cannot inject is
listed with how to run it beside (chaos.export.beside). Every object is checked against schemas written from Chaos
Mesh's CRDs and documentation (chaos.export.schemas) and Kubernetes' API reference (chaos.export.kubeschemas)
before anything is written (chaos.export.bundle). docs/export.md has the mapping and what it leaves out.
"""

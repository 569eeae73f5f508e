"""The Kubernetes operator of ConsumerGroupPolicy resources.

Render pure, apply in named steps, status in one place:
    spec.py           the CR spec as frozen values (SpecError names the field)
    settings.py       the operator's settings (nested dataclasses)
    names.py          names and labels of owned objects
    render_*.py       pure builders: consumer RBAC, plan ConfigMap, pods and Leases
    identities.py     slots, liveness, draining, members (pure)
    publish.py        target -> next plan: the handoff seam (groupops.planner.handoff)
    status.py         conditions and the only-on-change status patch
    kube.py, apply.py the API client with its error tree; the generic create/update/delete applier
    reconcile.py      one reconcile in named steps (context.py: what a run carries;
                      decide.py: target, trigger, approval, dry run; report.py: status, Events)
    handlers.py       kopf handlers (thin)
    metrics.py, events.py
"""

-- Argo CD health check for groupops.dev/ConsumerGroupPolicy.
-- Install as argocd-cm `resource.customizations.health.groupops.dev_ConsumerGroupPolicy`
-- (docs/gitops.md). Argo CD runs it with gopher-lua (Lua 5.1) and, for a script from argocd-cm,
-- only the base, table and package libraries: no `string`, no `math`. It sees the policy as the
-- global `obj` and must return {status = ..., message = ...}.
--
-- The first rule that matches decides:
--   1. no status, or status.observedGeneration below metadata.generation  -> Progressing
--      (the operator has not judged this spec yet; anything else in status is about an older one)
--   2. Stalled=True (InvalidSpec, Refused, AuthSecretForbidden: a person must change something)
--                                                                         -> Degraded
--   3. Degraded=True, whatever Ready says                                 -> Degraded
--      (with Ready=True the last good plan still runs, but something is wrong: a lag source
--      down, topics missing, pods rejected. Argo shows an application as its worst resource,
--      so this is what makes it visible; it wins over 4 and 5 for the same reason)
--   4. PlanApplied=False with reason AwaitingApproval, or spec.paused=true -> Suspended
--   5. Reconciling=True (handoff in flight, pods rolling, first plan)     -> Progressing
--   6. Ready=True                                                          -> Healthy
--   7. anything else (Ready=False with a reason such as LagPending or KubernetesUnavailable, or no
--      Ready condition yet)                                                -> Progressing
-- An object being deleted never reaches this script: Argo reports it Progressing itself.
-- tests/unit/gitops/test_health.py runs this script on every state above (make gitopscheck).

local function condition(status, kind)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function is_true(c)
  return c ~= nil and c.status == "True"
end

-- "Reason: message", or whichever of the two is set.
local function describe(c, fallback)
  local reason = c.reason or ""
  local message = c.message or ""
  if reason ~= "" and message ~= "" then
    return reason .. ": " .. message
  end
  if message ~= "" then
    return message
  end
  if reason ~= "" then
    return reason
  end
  return fallback
end

local function health(obj)
  local generation = 0
  if obj.metadata ~= nil and obj.metadata.generation ~= nil then
    generation = obj.metadata.generation
  end
  local status = obj.status
  if status == nil or status.observedGeneration == nil or status.observedGeneration < generation then
    return {
      status = "Progressing",
      message = "waiting for the operator to observe generation " .. generation,
    }
  end

  local stalled = condition(status, "Stalled")
  if is_true(stalled) then
    return { status = "Degraded", message = describe(stalled, "stalled: the operator needs a change to the policy") }
  end

  local degraded = condition(status, "Degraded")
  if is_true(degraded) then
    return { status = "Degraded", message = describe(degraded, "degraded") }
  end

  local applied = condition(status, "PlanApplied")
  if applied ~= nil and applied.status == "False" and applied.reason == "AwaitingApproval" then
    local id = nil
    if status.proposal ~= nil then
      id = status.proposal.id
    end
    if id ~= nil and id ~= "" then
      return { status = "Suspended", message = "proposal " .. id .. " waits for approval" }
    end
    return { status = "Suspended", message = "a proposal waits for approval" }
  end
  if obj.spec ~= nil and obj.spec.paused == true then
    return { status = "Suspended", message = "paused (spec.paused)" }
  end

  local reconciling = condition(status, "Reconciling")
  if is_true(reconciling) then
    return { status = "Progressing", message = describe(reconciling, "reconciling") }
  end

  local ready = condition(status, "Ready")
  if is_true(ready) then
    return { status = "Healthy", message = describe(ready, "ready") }
  end
  if ready ~= nil then
    return { status = "Progressing", message = describe(ready, "not ready") }
  end
  return { status = "Progressing", message = "waiting for the operator's first conditions" }
end

return health(obj)

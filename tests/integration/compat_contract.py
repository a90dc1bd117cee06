# SPDX-License-Identifier: MIT
"""The fields Olares's and HAMi-WebUI's clients read, held as data, and a
checker of the real acceld's answers against them (docs/compat.md pins the
client files and commits these models come from).

A model is a dict {field: kind}. A kind is
  "s" string, "i" integer, "n" number (integer or real), "b" boolean,
  ("s?" etc.: the value may also be null),
  a set of allowed string values,
  [kind] an array whose items are of kind,
  a nested model (dict).
A field whose name starts with "?" is optional: checked only when present.
Every other field must be present: a field a client reads that acceld does
not send fails the suite.
"""

OPTIONAL = "?"

KINDS = {
    "s": (str,),
    "i": (int,),
    "n": (int, float),
    "b": (bool,),
}


NAMES = {"s": "string", "i": "integer", "n": "number", "b": "boolean"}


def _check_scalar(kind, v, where, errors):
    nullable = kind.endswith("?")
    base = kind.rstrip("?")
    word = NAMES[base]
    if v is None:
        if not nullable:
            errors.append("%s: null, the client reads a %s" % (where, word))
        return
    types = KINDS[base]
    # a JSON true is no number to a client, and a number no boolean
    if isinstance(v, bool) and base != "b":
        errors.append("%s: boolean %r, the client reads a %s"
                      % (where, v, word))
    elif not isinstance(v, types):
        errors.append("%s: %s %r, the client reads a %s"
                      % (where, type(v).__name__, v, word))


def check(model, value, where="$", errors=None):
    """Errors (strings) where value does not hold model; [] when it does."""
    if errors is None:
        errors = []
    if isinstance(model, str):
        _check_scalar(model, value, where, errors)
    elif isinstance(model, (set, frozenset)):
        if value not in model:
            errors.append("%s: %r is none of %s" % (where, value,
                                                    sorted(model)))
    elif isinstance(model, list):
        if not isinstance(value, list):
            errors.append("%s: %s, the client reads an array"
                          % (where, type(value).__name__))
        else:
            for i, item in enumerate(value):
                check(model[0], item, "%s[%d]" % (where, i), errors)
    elif isinstance(model, dict):
        if not isinstance(value, dict):
            errors.append("%s: %s, the client reads an object"
                          % (where, type(value).__name__))
            return errors
        for key, kind in model.items():
            name = key.lstrip(OPTIONAL)
            if name not in value:
                if not key.startswith(OPTIONAL):
                    errors.append("%s.%s: missing (the client reads it)"
                                  % (where, name))
                continue
            check(kind, value[name], "%s.%s" % (where, name), errors)
    else:
        raise TypeError("bad model at %s: %r" % (where, model))
    return errors


def assert_holds(test, model, value, what):
    """Fail test naming every field of model that value does not hold."""
    errors = check(model, value)
    test.assertEqual(errors, [], "%s does not hold the client's model:\n  %s"
                     % (what, "\n  ".join(errors)))


# ---- envelopes ----

SHARE_MODES = frozenset({"0", "1", "2"})
SUPPORT_TYPES = frozenset({"Exclusive", "MemorySlice", "TimeSlice"})


def envelope(data_model):
    """The {code, message, data} envelope the Settings page's interceptor
    and olares-cli's decodeData read (code 0 or 200)."""
    return {"code": frozenset({0, 200}), "message": "s?", "data": data_model}


def failed_check(type_name, data_model):
    """app-service's HandleFailedCheck as olares-cli's parseFailedCheck and
    the settings compute supportTypeEnvelope read it: HTTP 200,
    {code:422, data:{type, Data}}."""
    return {"code": frozenset({422}),
            "data": {"type": frozenset({type_name}), "Data": data_model}}


# ---- Settings > GPU (1.12.5) and olares-cli settings gpu list ----

# stores/settings/gpu.ts GPUInfo, pages/settings/GPU/GPUPage.vue
# (allowedShareModes), dashboard types/gpu.ts SettingsGPUItem (index),
# cli/cmd/ctl/settings/gpu/list.go gpuInfo. devmem and memory in MiB.
LEGACY_APP = {"appName": "s", "?memory": "i"}
LEGACY_GPU = {
    "nodeName": "s", "id": "s", "index": "i", "count": "i",
    "devmem": "i", "devcore": "i", "type": "s", "mode": "s",
    "health": "b", "sharemode": SHARE_MODES,
    "allowedShareModes": [SHARE_MODES], "apps": [LEGACY_APP],
    "?memoryAllocated": "i", "?memoryAvailable": "i",
}
# in Memory slicing the page shows the quota and what is left
LEGACY_GPU_MEMSLICE = dict(LEGACY_GPU, memoryAllocated="i",
                           memoryAvailable="i",
                           apps=[{"appName": "s", "memory": "i"}])

# ---- Dashboard (Overview2/GPU) and olares-cli dashboard (HAMi-WebUI) ----

# dashboard types/gpu.ts Graphics + beclab HAMi-WebUI card.proto GPUReply
# + olares-cli pkg/dashboard gpu list raw fields. MiB, W, degrees C.
HAMI_GPU = {
    "uuid": "s", "nodeName": "s", "type": "s", "vgpuUsed": "i",
    "vgpuTotal": "i", "coreUsed": "i", "coreTotal": "i",
    "coreUtilizedPercent": "n", "memoryUsed": "i", "memoryUtilized": "n",
    "memoryTotal": "i", "memoryUtilizedPercent": "n", "nodeUid": "s",
    "health": "b", "mode": "s", "shareMode": SHARE_MODES, "power": "n",
    "powerLimit": "n", "temperature": "n",
}
# Overview2/GPU/config.ts TaskStatusOptions
TASK_STATUS = frozenset({"success", "failed", "closed", "unknown"})
# dashboard types/gpu.ts TaskItem + beclab container.proto ContainerReply
HAMI_TASK = {
    "name": "s", "status": TASK_STATUS, "appName": "s", "nodeName": "s",
    "allocatedDevices": "i", "allocatedCores": "i", "allocatedMem": "i",
    "type": frozenset({"NVIDIA", "AMD", "Intel"}), "createTime": "s",
    "startTime": "s?", "endTime": "s?", "podUid": "s", "nodeUid": "s",
    "resourcePool": "s", "flavor": "s", "priority": "s", "namespace": "s",
    "deviceIds": ["s"], "deviceShareModes": [SHARE_MODES],
    "devicesMemUtilized": ["n"], "devicesCoreUtilizedPercent": ["n"],
}
# dashboard types/gpu.ts GPUNode + HAMi-WebUI node.proto NodeReply
HAMI_NODE = {
    "ip": "s", "isSchedulable": "b", "isReady": "b", "type": ["s"],
    "vgpuUsed": "i", "vgpuTotal": "i", "coreUsed": "i", "coreTotal": "i",
    "memoryUsed": "i", "memoryTotal": "i", "uid": "s", "name": "s",
    "cardCnt": "i", "osImage": "s", "operatingSystem": "s",
    "kernelVersion": "s", "containerRuntimeVersion": "s",
    "kubeletVersion": "s", "kubeProxyVersion": "s", "architecture": "s",
    "creationTimestamp": "s",
}
# node.proto DeviceSummaryReply
HAMI_SUMMARY = {
    "vgpuUsed": "i", "vgpuTotal": "i", "coreUsed": "i", "coreTotal": "i",
    "memoryUsed": "i", "memoryTotal": "i", "gpuCount": "i", "nodeCount": "i",
}

# ---- app-service compute (1.12.6): olares-cli settings compute, market ----

# settings/compute/types.go computeSpec / computeBinding / computeDevice /
# computeNode; app-service compute/types.go Requirement. Bytes, millicores.
REQUIREMENT = {
    "mode": "s", "requiredCpu": "i", "requiredGpu": "i", "limitedGpu": "i",
    "requiredMemory": "i", "limitedMemory": "i", "requiredDisk": "i",
    "supportMultiCards": "b", "supportMultiNodes": "b",
}
ALLOCATION = {
    "appName": "s", "owner": "s", "mode": "s", "nodeName": "s",
    "deviceId": "s", "memory": "i", "?spec": REQUIREMENT,
}
DEVICE = {
    "id": "s", "nodeName": "s", "mode": "s", "?cardModel": "s", "memory": "i",
    "health": frozenset({"yes", "no"}), "supportType": SUPPORT_TYPES,
    "availableSupportTypes": [SUPPORT_TYPES], "bindings": [ALLOCATION],
}
NODE = {"nodeName": "s", "gpuTypes": ["s"], "?health": "s",
        "devices": [DEVICE]}
APP_REF = {"appName": "s", "owner": "s", "state": "s"}
SWITCH_RESULT = {"status": frozenset({"switched", "unchanged"}),
                 "device": DEVICE, "stoppedApps": [APP_REF]}
SWITCH_BLOCKED = {"status": frozenset({"bound-apps-stop-blocked"}),
                  "device": DEVICE,
                  "blockedApps": [dict(APP_REF, reason="s")]}

# market/compute.go computeModePlan (resolveComputeMode reads status ==
# "installable"); app-service ModePlanResult and its plan statuses
MODE_PLAN = [{"computeType": "s",
              "status": frozenset({"installable", "insufficient-resources",
                                   "no-matching-node"}),
              "?reason": "s"}]
# compute/types.go DeviceOption / NodeOption / AvailabilityResult, as
# market/compute.go operableDevices, deviceOptionLine and requirementSummary
# read them
DEVICE_OPTION = {
    "nodeName": "s", "deviceId": "s", "?cardModel": "s", "supportType": "s",
    "capacity": "i", "available": "i", "?fitLevel": "s", "health": "s",
    "operable": "b",
}
AVAILABILITY = {
    "schedulable": "b", "requirement": REQUIREMENT,
    "scope": frozenset({"card", "single-node-cards", "cross-node-cards"}),
    "nodes": [{"nodeName": "s", "gpuType": "s", "status": "s",
               "devices": [DEVICE_OPTION]}],
    "?reason": "s",
}
PRESSURE_DIM = {"resource": frozenset({"cpu", "memory", "disk"}),
                "required": "i", "used": "i", "capacity": "i",
                "available": "i", "pressured": "b"}
# BindingValidationResult as humanizeBindingValidation reads it
VALIDATION = {"ok": "b", "code": "s", "reason": "s",
              "?nodePressure": {"nodeName": "s",
                                "dimensions": [PRESSURE_DIM]}}
BINDING_REQUIRED = {"availability": AVAILABILITY}
BINDING_UNAVAILABLE = {"availability": AVAILABILITY,
                       "validation": VALIDATION}
# app-service validateComputeBinding's BindingApplyResult
VALIDATE_RESULT = {"status": frozenset({"valid", "not-required"}),
                   "availability": AVAILABILITY, "validation": VALIDATION,
                   "allocations": [ALLOCATION]}

# compute/preflight_types.go PreflightReport; an owner_quota dimension
# names accel's member limits (apps, gpu-memory) in the same shape
PREFLIGHT_DIM = dict(PRESSURE_DIM, resource=frozenset(
    {"cpu", "memory", "disk", "apps", "gpu-memory"}))
PREFLIGHT_REPORT = {
    "installable": "b", "?failedDemandId": "s",
    "?reason": frozenset({"cluster_capacity", "cluster_pressure",
                          "owner_quota", "node_pressure", "unschedulable"}),
    "?pressure": [{"source": "s", "dimensions": [PREFLIGHT_DIM]}],
}

# The image's default kata-agent policy: every agent request allowed, as
# upstream's podVM does by default (CAA v0.22.0 DEFAULT_AGENT_POLICY_FILE).
# The agent reads /etc/kata-opa/default-policy.rego at start (kata src/agent/
# policy/src/policy.rs); that path is a symlink to /run/peerpod/policy.rego,
# which starts as a copy of this file (tmpfiles caa-gcp-t4-guest.conf) and is
# replaced by the pod's initdata policy ("policy.rego" in initdata's data)
# when process-user-data runs. Restrict a pod by giving it an initdata policy.
#
# One rule per request message of the agent's service at kata cf82bb35c803
# (test/podvm/fixtures/kata-agent-requests.txt; podvm lint checks that every
# one has a rule here).
package agent_policy

default AddARPNeighborsRequest := true
default AddSwapPathRequest := true
default AddSwapRequest := true
default CloseStdinRequest := true
default CopyFileRequest := true
default CreateContainerRequest := true
default CreateSandboxRequest := true
default DestroySandboxRequest := true
default ExecProcessRequest := true
default GetDiagnosticDataRequest := true
default GetIPTablesRequest := true
default GetMetricsRequest := true
default GetOOMEventRequest := true
default GuestDetailsRequest := true
default ListInterfacesRequest := true
default ListRoutesRequest := true
default MemAgentCompactConfig := true
default MemAgentMemcgConfig := true
default MemHotplugByProbeRequest := true
default OnlineCPUMemRequest := true
default PauseContainerRequest := true
default ReadStreamRequest := true
default RemoveContainerRequest := true
default RemoveStaleVirtiofsShareMountsRequest := true
default ReseedRandomDevRequest := true
default ResizeVolumeRequest := true
default ResumeContainerRequest := true
default SetGuestDateTimeRequest := true
default SetIPTablesRequest := true
default SetPolicyRequest := true
default SignalProcessRequest := true
default StartContainerRequest := true
default StatsContainerRequest := true
default TtyWinResizeRequest := true
default UpdateContainerRequest := true
default UpdateEphemeralMountsRequest := true
default UpdateInterfaceRequest := true
default UpdateRoutesRequest := true
default VolumeStatsRequest := true
default WaitProcessRequest := true
default WriteStreamRequest := true

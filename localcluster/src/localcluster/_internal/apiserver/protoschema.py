"""The protobuf messages of the kinds this server reads, as field number -> JSON name and type.

Transcribed from k8s.io/api and k8s.io/apimachinery generated.proto (kubernetes v1.37; a field's number
never changes once released) for every kind a kubectl command sends typed (create job|quota|service|
poddisruptionbudget|priorityclass|token|namespace|secret|configmap|serviceaccount|role|..., auth can-i,
drain's Eviction, debug --copy-to's Pod) and the pod template they carry. Each message is written as

    message NAME
      NUMBER JSON-NAME TYPE

with TYPE one of `string`, `int`, `bool`, `bytes`, `double`, `quantity`, `time`, `intorstring`, a message
name, `[]T` (repeated), `map<V>` (string keys), or `~NAME` (an embedded Go struct, inlined in JSON). A `!`
after the type keeps a zero value: the field is a pointer (or not omitempty) in Go, so 0, false or "" sent on
the wire is meant, where a plain field's zero is the Go default that JSON would have omitted.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA_TEXT = """
message Time
  1 seconds int
  2 nanos int
message ObjectMeta
  1 name string
  2 generateName string
  3 namespace string
  4 selfLink string
  5 uid string
  6 resourceVersion string
  7 generation int
  8 creationTimestamp time
  9 deletionTimestamp time
  10 deletionGracePeriodSeconds int!
  11 labels map<string>
  12 annotations map<string>
  13 ownerReferences []OwnerReference
  14 finalizers []string
message OwnerReference
  1 kind string
  3 name string
  4 uid string
  5 apiVersion string
  6 controller bool!
  7 blockOwnerDeletion bool!
message ObjectReference
  1 kind string
  2 namespace string
  3 name string
  4 uid string
  5 apiVersion string
  6 resourceVersion string
  7 fieldPath string
message LocalObjectReference
  1 name string
message LabelSelector
  1 matchLabels map<string>
  2 matchExpressions []LabelSelectorRequirement
message LabelSelectorRequirement
  1 key string
  2 operator string
  3 values []string
message Condition
  1 type string
  2 status string
  3 observedGeneration int
  4 lastTransitionTime time
  5 reason string!
  6 message string!
message Preconditions
  1 uid string!
  2 resourceVersion string!
message DeleteOptions
  1 gracePeriodSeconds int!
  2 preconditions Preconditions
  3 orphanDependents bool!
  4 propagationPolicy string!
  5 dryRun []string
  6 ignoreStoreReadErrorWithClusterBreakingPotential bool!

message Namespace
  1 metadata ObjectMeta
  2 spec NamespaceSpec
  3 status NamespaceStatus
message NamespaceSpec
  1 finalizers []string
message NamespaceStatus
  1 phase string
message Secret
  1 metadata ObjectMeta
  2 data map<bytes>
  3 type string
  4 stringData map<string>
  5 immutable bool!
message ConfigMap
  1 metadata ObjectMeta
  2 data map<string>
  3 binaryData map<bytes>
  4 immutable bool!
message ServiceAccount
  1 metadata ObjectMeta
  2 secrets []ObjectReference
  3 imagePullSecrets []LocalObjectReference
  4 automountServiceAccountToken bool!
message Binding
  1 metadata ObjectMeta
  2 target ObjectReference
message ResourceQuota
  1 metadata ObjectMeta
  2 spec ResourceQuotaSpec
  3 status ResourceQuotaStatus
message ResourceQuotaSpec
  1 hard map<quantity>
  2 scopes []string
  3 scopeSelector ScopeSelector
message ScopeSelector
  1 matchExpressions []ScopedResourceSelectorRequirement
message ScopedResourceSelectorRequirement
  1 scopeName string
  2 operator string
  3 values []string
message ResourceQuotaStatus
  1 hard map<quantity>
  2 used map<quantity>
message Service
  1 metadata ObjectMeta
  2 spec ServiceSpec
  3 status ServiceStatus
message ServiceSpec
  1 ports []ServicePort
  2 selector map<string>
  3 clusterIP string
  4 type string
  5 externalIPs []string
  7 sessionAffinity string
  8 loadBalancerIP string
  9 loadBalancerSourceRanges []string
  10 externalName string
  11 externalTrafficPolicy string
  12 healthCheckNodePort int
  13 publishNotReadyAddresses bool
  17 ipFamilyPolicy string!
  18 clusterIPs []string
  19 ipFamilies []string
  20 allocateLoadBalancerNodePorts bool!
  21 loadBalancerClass string!
  22 internalTrafficPolicy string!
  23 trafficDistribution string!
message ServicePort
  1 name string
  2 protocol string
  3 port int!
  4 targetPort intorstring
  5 nodePort int
  6 appProtocol string!
message ServiceStatus
  1 loadBalancer LoadBalancerStatus
  2 conditions []Condition
message LoadBalancerStatus
  1 ingress []LoadBalancerIngress
message LoadBalancerIngress
  1 ip string
  2 hostname string

message Pod
  1 metadata ObjectMeta
  2 spec PodSpec
  3 status PodStatus
message PodStatus
  1 phase string
  2 conditions []PodCondition
  3 message string
  4 reason string
  5 hostIP string
  6 podIP string
  7 startTime time
  8 containerStatuses []ContainerStatus
  9 qosClass string
  10 initContainerStatuses []ContainerStatus
  11 nominatedNodeName string
  12 podIPs []PodIP
  16 hostIPs []HostIP
message PodIP
  1 ip string
message HostIP
  1 ip string
message PodCondition
  1 type string
  2 status string
  3 lastProbeTime time
  4 lastTransitionTime time
  5 reason string
  6 message string
  7 observedGeneration int
message ContainerStatus
  1 name string
  2 state ContainerState
  3 lastState ContainerState
  4 ready bool!
  5 restartCount int!
  6 image string!
  7 imageID string!
  8 containerID string
  9 started bool!
message ContainerState
  1 waiting ContainerStateWaiting
  2 running ContainerStateRunning
  3 terminated ContainerStateTerminated
message ContainerStateWaiting
  1 reason string
  2 message string
message ContainerStateRunning
  1 startedAt time
message ContainerStateTerminated
  1 exitCode int!
  2 signal int
  3 reason string
  4 message string
  5 startedAt time
  6 finishedAt time
  7 containerID string
message PodTemplateSpec
  1 metadata ObjectMeta
  2 spec PodSpec
message PodSpec
  1 volumes []Volume
  2 containers []Container
  3 restartPolicy string
  4 terminationGracePeriodSeconds int!
  5 activeDeadlineSeconds int!
  6 dnsPolicy string
  7 nodeSelector map<string>
  8 serviceAccountName string
  9 serviceAccount string
  10 nodeName string
  11 hostNetwork bool
  12 hostPID bool
  13 hostIPC bool
  14 securityContext PodSecurityContext
  15 imagePullSecrets []LocalObjectReference
  16 hostname string
  17 subdomain string
  18 affinity Affinity
  19 schedulerName string
  20 initContainers []Container
  21 automountServiceAccountToken bool!
  22 tolerations []Toleration
  23 hostAliases []HostAlias
  24 priorityClassName string
  25 priority int!
  27 shareProcessNamespace bool!
  28 readinessGates []PodReadinessGate
  29 runtimeClassName string!
  30 enableServiceLinks bool!
  31 preemptionPolicy string!
  32 overhead map<quantity>
  33 topologySpreadConstraints []TopologySpreadConstraint
  35 setHostnameAsFQDN bool!
  37 hostUsers bool!
  38 schedulingGates []PodSchedulingGate
message Container
  1 name string
  2 image string
  3 command []string
  4 args []string
  5 workingDir string
  6 ports []ContainerPort
  7 env []EnvVar
  8 resources ResourceRequirements
  9 volumeMounts []VolumeMount
  10 livenessProbe Probe
  11 readinessProbe Probe
  12 lifecycle Lifecycle
  13 terminationMessagePath string
  14 imagePullPolicy string
  15 securityContext SecurityContext
  16 stdin bool
  17 stdinOnce bool
  18 tty bool
  19 envFrom []EnvFromSource
  20 terminationMessagePolicy string
  22 startupProbe Probe
  24 restartPolicy string!
message ContainerPort
  1 name string
  2 hostPort int
  3 containerPort int!
  4 protocol string
  5 hostIP string
message EnvVar
  1 name string
  2 value string
  3 valueFrom EnvVarSource
message EnvVarSource
  1 fieldRef ObjectFieldSelector
  2 resourceFieldRef ResourceFieldSelector
  3 configMapKeyRef ConfigMapKeySelector
  4 secretKeyRef SecretKeySelector
message ObjectFieldSelector
  1 apiVersion string
  2 fieldPath string
message ResourceFieldSelector
  1 containerName string
  2 resource string
  3 divisor quantity
message ConfigMapKeySelector
  1 localObjectReference ~LocalObjectReference
  2 key string
  3 optional bool!
message SecretKeySelector
  1 localObjectReference ~LocalObjectReference
  2 key string
  3 optional bool!
message EnvFromSource
  1 prefix string
  2 configMapRef ConfigMapEnvSource
  3 secretRef SecretEnvSource
message ConfigMapEnvSource
  1 localObjectReference ~LocalObjectReference
  2 optional bool!
message SecretEnvSource
  1 localObjectReference ~LocalObjectReference
  2 optional bool!
message ResourceRequirements
  1 limits map<quantity>
  2 requests map<quantity>
message VolumeMount
  1 name string
  2 readOnly bool
  3 mountPath string
  4 subPath string
  5 mountPropagation string!
  6 subPathExpr string
  7 recursiveReadOnly string!
message Probe
  1 handler ~ProbeHandler
  2 initialDelaySeconds int
  3 timeoutSeconds int
  4 periodSeconds int
  5 successThreshold int
  6 failureThreshold int
  7 terminationGracePeriodSeconds int!
message ProbeHandler
  1 exec ExecAction
  2 httpGet HTTPGetAction
  3 tcpSocket TCPSocketAction
  4 grpc GRPCAction
message LifecycleHandler
  1 exec ExecAction
  2 httpGet HTTPGetAction
  3 tcpSocket TCPSocketAction
  4 sleep SleepAction
message Lifecycle
  1 postStart LifecycleHandler
  2 preStop LifecycleHandler
  3 stopSignal string!
message SleepAction
  1 seconds int!
message ExecAction
  1 command []string
message HTTPGetAction
  1 path string
  2 port intorstring
  3 host string
  4 scheme string
  5 httpHeaders []HTTPHeader
message HTTPHeader
  1 name string
  2 value string!
message TCPSocketAction
  1 port intorstring
  2 host string
message GRPCAction
  1 port int!
  2 service string!
message SecurityContext
  1 capabilities Capabilities
  2 privileged bool!
  3 seLinuxOptions SELinuxOptions
  4 runAsUser int!
  5 runAsNonRoot bool!
  6 readOnlyRootFilesystem bool!
  7 allowPrivilegeEscalation bool!
  8 runAsGroup int!
  9 procMount string!
  11 seccompProfile SeccompProfile
message Capabilities
  1 add []string
  2 drop []string
message SELinuxOptions
  1 user string
  2 role string
  3 type string
  4 level string
message SeccompProfile
  1 type string
  2 localhostProfile string!
message PodSecurityContext
  1 seLinuxOptions SELinuxOptions
  2 runAsUser int!
  3 runAsNonRoot bool!
  4 supplementalGroups []int
  5 fsGroup int!
  6 runAsGroup int!
  7 sysctls []Sysctl
  9 fsGroupChangePolicy string!
  10 seccompProfile SeccompProfile
message Sysctl
  1 name string
  2 value string
message Volume
  1 name string
  2 volumeSource ~VolumeSource
message VolumeSource
  1 hostPath HostPathVolumeSource
  2 emptyDir EmptyDirVolumeSource
  6 secret SecretVolumeSource
  10 persistentVolumeClaim PersistentVolumeClaimVolumeSource
  16 downwardAPI DownwardAPIVolumeSource
  19 configMap ConfigMapVolumeSource
  26 projected ProjectedVolumeSource
message HostPathVolumeSource
  1 path string
  2 type string!
message EmptyDirVolumeSource
  1 medium string
  2 sizeLimit quantity
message SecretVolumeSource
  1 secretName string
  2 items []KeyToPath
  3 defaultMode int!
  4 optional bool!
message ConfigMapVolumeSource
  1 localObjectReference ~LocalObjectReference
  2 items []KeyToPath
  3 defaultMode int!
  4 optional bool!
message KeyToPath
  1 key string
  2 path string
  3 mode int!
message PersistentVolumeClaimVolumeSource
  1 claimName string
  2 readOnly bool
message DownwardAPIVolumeSource
  1 items []DownwardAPIVolumeFile
  2 defaultMode int!
message DownwardAPIVolumeFile
  1 path string
  2 fieldRef ObjectFieldSelector
  3 resourceFieldRef ResourceFieldSelector
  4 mode int!
message ProjectedVolumeSource
  1 sources []VolumeProjection
  2 defaultMode int!
message VolumeProjection
  1 secret SecretProjection
  2 downwardAPI DownwardAPIProjection
  3 configMap ConfigMapProjection
  4 serviceAccountToken ServiceAccountTokenProjection
message SecretProjection
  1 localObjectReference ~LocalObjectReference
  2 items []KeyToPath
  4 optional bool!
message ConfigMapProjection
  1 localObjectReference ~LocalObjectReference
  2 items []KeyToPath
  4 optional bool!
message DownwardAPIProjection
  1 items []DownwardAPIVolumeFile
message ServiceAccountTokenProjection
  1 audience string
  2 expirationSeconds int!
  3 path string
message Toleration
  1 key string
  2 operator string
  3 value string
  4 effect string
  5 tolerationSeconds int!
message HostAlias
  1 ip string
  2 hostnames []string
message PodReadinessGate
  1 conditionType string
message PodSchedulingGate
  1 name string
message TopologySpreadConstraint
  1 maxSkew int!
  2 topologyKey string
  3 whenUnsatisfiable string
  4 labelSelector LabelSelector
  5 minDomains int!
  6 nodeAffinityPolicy string!
  7 nodeTaintsPolicy string!
  8 matchLabelKeys []string
message Affinity
  1 nodeAffinity NodeAffinity
  2 podAffinity PodAffinity
  3 podAntiAffinity PodAntiAffinity
message NodeAffinity
  1 requiredDuringSchedulingIgnoredDuringExecution NodeSelector
  2 preferredDuringSchedulingIgnoredDuringExecution []PreferredSchedulingTerm
message NodeSelector
  1 nodeSelectorTerms []NodeSelectorTerm
message NodeSelectorTerm
  1 matchExpressions []NodeSelectorRequirement
  2 matchFields []NodeSelectorRequirement
message NodeSelectorRequirement
  1 key string
  2 operator string
  3 values []string
message PreferredSchedulingTerm
  1 weight int!
  2 preference NodeSelectorTerm
message PodAffinity
  1 requiredDuringSchedulingIgnoredDuringExecution []PodAffinityTerm
  2 preferredDuringSchedulingIgnoredDuringExecution []WeightedPodAffinityTerm
message PodAntiAffinity
  1 requiredDuringSchedulingIgnoredDuringExecution []PodAffinityTerm
  2 preferredDuringSchedulingIgnoredDuringExecution []WeightedPodAffinityTerm
message PodAffinityTerm
  1 labelSelector LabelSelector
  2 namespaces []string
  3 topologyKey string
  4 namespaceSelector LabelSelector
  5 matchLabelKeys []string
  6 mismatchLabelKeys []string
message WeightedPodAffinityTerm
  1 weight int!
  2 podAffinityTerm PodAffinityTerm

message Job
  1 metadata ObjectMeta
  2 spec JobSpec
  3 status JobStatus
message JobSpec
  1 parallelism int!
  2 completions int!
  3 activeDeadlineSeconds int!
  4 selector LabelSelector
  5 manualSelector bool!
  6 template PodTemplateSpec
  7 backoffLimit int!
  8 ttlSecondsAfterFinished int!
  9 completionMode string!
  10 suspend bool!
  11 podFailurePolicy PodFailurePolicy
  12 backoffLimitPerIndex int!
  13 maxFailedIndexes int!
  14 podReplacementPolicy string!
  15 managedBy string!
message PodFailurePolicy
  1 rules []PodFailurePolicyRule
message PodFailurePolicyRule
  1 action string
  2 onExitCodes PodFailurePolicyOnExitCodesRequirement
  3 onPodConditions []PodFailurePolicyOnPodConditionsPattern
message PodFailurePolicyOnExitCodesRequirement
  1 containerName string!
  2 operator string
  3 values []int
message PodFailurePolicyOnPodConditionsPattern
  1 type string
  2 status string
message JobStatus
  1 conditions []JobCondition
  2 startTime time
  3 completionTime time
  4 active int
  5 succeeded int
  6 failed int
  7 completedIndexes string
  8 uncountedTerminatedPods UncountedTerminatedPods
  9 ready int!
  10 failedIndexes string!
  11 terminating int!
message JobCondition
  1 type string
  2 status string
  3 lastProbeTime time
  4 lastTransitionTime time
  5 reason string
  6 message string
message UncountedTerminatedPods
  1 succeeded []string
  2 failed []string
message PodDisruptionBudget
  1 metadata ObjectMeta
  2 spec PodDisruptionBudgetSpec
  3 status PodDisruptionBudgetStatus
message PodDisruptionBudgetSpec
  1 minAvailable intorstring!
  2 selector LabelSelector
  3 maxUnavailable intorstring!
  4 unhealthyPodEvictionPolicy string!
message PodDisruptionBudgetStatus
  1 observedGeneration int
  2 disruptedPods map<time>
  3 disruptionsAllowed int!
  4 currentHealthy int!
  5 desiredHealthy int!
  6 expectedPods int!
  7 conditions []Condition
message Eviction
  1 metadata ObjectMeta
  2 deleteOptions DeleteOptions
message PriorityClass
  1 metadata ObjectMeta
  2 value int!
  3 globalDefault bool
  4 description string
  5 preemptionPolicy string!

message PolicyRule
  1 verbs []string
  2 apiGroups []string
  3 resources []string
  4 resourceNames []string
  5 nonResourceURLs []string
message Role
  1 metadata ObjectMeta
  2 rules []PolicyRule
message ClusterRole
  1 metadata ObjectMeta
  2 rules []PolicyRule
  3 aggregationRule AggregationRule
message AggregationRule
  1 clusterRoleSelectors []LabelSelector
message Subject
  1 kind string
  2 apiGroup string
  3 name string
  4 namespace string
message RoleRef
  1 apiGroup string
  2 kind string
  3 name string
message RoleBinding
  1 metadata ObjectMeta
  2 subjects []Subject
  3 roleRef RoleRef
message ClusterRoleBinding
  1 metadata ObjectMeta
  2 subjects []Subject
  3 roleRef RoleRef
message BoundObjectReference
  1 kind string
  2 apiVersion string
  3 name string
  4 uid string
message TokenRequestSpec
  1 audiences []string
  3 boundObjectRef BoundObjectReference
  4 expirationSeconds int!
message TokenRequest
  1 metadata ObjectMeta
  2 spec TokenRequestSpec
message ResourceAttributes
  1 namespace string
  2 verb string
  3 group string
  4 version string
  5 resource string
  6 subresource string
  7 name string
message NonResourceAttributes
  1 path string
  2 verb string
message SelfSubjectAccessReviewSpec
  1 resourceAttributes ResourceAttributes
  2 nonResourceAttributes NonResourceAttributes
message SubjectAccessReviewSpec
  1 resourceAttributes ResourceAttributes
  2 nonResourceAttributes NonResourceAttributes
  3 user string
  4 groups []string
  5 extra map<ExtraValue>
  6 uid string
message ExtraValue
  1 items []string
message SelfSubjectAccessReview
  1 metadata ObjectMeta
  2 spec SelfSubjectAccessReviewSpec
message SubjectAccessReview
  1 metadata ObjectMeta
  2 spec SubjectAccessReviewSpec
message LocalSubjectAccessReview
  1 metadata ObjectMeta
  2 spec SubjectAccessReviewSpec
message SelfSubjectRulesReviewSpec
  1 namespace string
message SelfSubjectRulesReview
  1 metadata ObjectMeta
  2 spec SelfSubjectRulesReviewSpec
message SelfSubjectReview
  1 metadata ObjectMeta
"""


@dataclass(frozen=True)
class Field:
    name: str
    kind: str          # a scalar type, a message name, or "map:V"
    repeated: bool = False
    inline: bool = False
    keep_zero: bool = False


Message = dict[int, Field]


def parse(text: str) -> dict[str, Message]:
    messages: dict[str, Message] = {}
    current: Message | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        words = line.split()
        if words[0] == "message":
            current = messages.setdefault(words[1], {})
            continue
        assert current is not None, line
        number, name, kind = int(words[0]), words[1], words[2]
        keep = kind.endswith("!")
        kind = kind.rstrip("!")
        repeated = kind.startswith("[]")
        kind = kind.removeprefix("[]")
        inline = kind.startswith("~")
        kind = kind.removeprefix("~")
        if kind.startswith("map<"):
            kind = "map:" + kind[4:-1]
        current[number] = Field(name, kind, repeated, inline, keep)
    return messages


MESSAGES = parse(SCHEMA_TEXT)
SCALARS = frozenset({"string", "int", "bool", "bytes", "double", "quantity", "time", "intorstring"})
# the top-level kinds a body may carry (TypeMeta.kind), each read as the message of the same name
KINDS = frozenset({
    "Namespace", "Secret", "ConfigMap", "ServiceAccount", "Binding", "ResourceQuota", "Service", "Pod", "Job",
    "PodDisruptionBudget", "Eviction", "PriorityClass", "Role", "ClusterRole", "RoleBinding",
    "ClusterRoleBinding", "TokenRequest", "SelfSubjectAccessReview", "SubjectAccessReview",
    "LocalSubjectAccessReview", "SelfSubjectRulesReview", "SelfSubjectReview", "DeleteOptions"})

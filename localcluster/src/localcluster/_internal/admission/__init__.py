"""The rules a write passes before it is stored, in kube-apiserver's order: decoding checks and validation
(422 with the real field causes), defaulting, update restrictions and RBAC escalation, then the admission
plugins: LimitRanger, ServiceAccount, PodSecurity (baseline and restricted), ResourceQuota."""

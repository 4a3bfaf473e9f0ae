"""Who is asking and may they: bearer tokens (admin, ServiceAccounts), the cluster's CA, certificates and
kubeconfig, identities and impersonation, RBAC authorization rule for rule, escalation prevention."""

"""The vocabulary every part of the cluster shares, as k8s.io/apimachinery defines it: resource quantities,
name and label rules, label and field selectors, the three patch kinds, field errors and Status objects.
Pure: no I/O, no state."""

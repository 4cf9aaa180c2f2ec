"""The test kubelet and scheduler for AntDT's Kubernetes end-to-end tests."""

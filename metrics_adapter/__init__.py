"""EDL metrics adapter: Kubernetes custom and external metrics APIs for training jobs."""

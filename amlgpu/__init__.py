"""aml-gpu-training: distributed GPU training on Azure Machine Learning, as code."""

NAMESPACE = "aml-gpu-training"
"""The Pulumi project name, which is also the config namespace of every stack file."""

"""Which micro-batch x gradient-accumulation split trains a LoRA fastest, and does it fit under a memory cap."""

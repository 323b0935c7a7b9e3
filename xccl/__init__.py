"""xccl-synth: topology-aware synthesis of collective-communication algorithms."""

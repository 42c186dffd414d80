"""Synthesized low-light inputs."""

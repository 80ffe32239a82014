"""The agent process (`edl-agent`): its CLI, settings, exporter and the trainer's supervisor.

Never imported by the trainer library (`agent.trainer`); see docs/architecture.md.
"""

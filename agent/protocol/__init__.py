"""What the agent process and the trainer library both speak, free of any framework.

Imported by both sides of the process boundary: the environment names the agent sets for its
trainer (`env`), the neutral world a trainer runs in (`world`), and the control channel's
messages and exit statuses (`control`). No module here imports a training framework or says a
framework's variable names; those live in `agent.trainer.frameworks.<name>`.
"""

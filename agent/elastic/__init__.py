"""Elastic training, agent side: world agreement and trainer supervision across generations.

`Membership` over a `MembershipStore` (`LocalStore`, `KubernetesStore`) agrees on the world;
`ElasticSupervisor` runs the trainer through it. The training-script side (`ElasticTrainer`,
`ElasticSampler`) is in `agent.trainer`; both speak `agent.protocol`.
"""

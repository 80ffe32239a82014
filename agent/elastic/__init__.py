"""Elastic training: world agreement, trainer supervision across generations, exactly-once data.

Trainer-side API: `agent.elastic.trainer.ElasticTrainer` (imports Paddle lazily). Agent side:
`Membership` over a `MembershipStore` (`LocalStore`, `KubernetesStore`) and `ElasticSupervisor`.
"""

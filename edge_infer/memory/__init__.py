"""Memory planning: activation arena, buddy allocator for dynamic tensors."""
from .arena import ArenaPlan, plan_arena

__all__ = ["ArenaPlan", "plan_arena"]

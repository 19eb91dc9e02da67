"""Per-backend concurrency limiting: `Limiter` runs the control tick, `Slot` is one request's hold.

Modules: `limiter` (the tick that feeds the algorithm and applies its limit), `slots` (the count in
flight and the slots), `evidence` (latency samples, first tokens and streams in flight), `ceiling`
(the KV-cache ceiling) and `counters` (the engine's preemption counter between ticks).
"""

from gateway.limiter.limiter import Limiter
from gateway.limiter.slots import Slot

__all__ = ["Limiter", "Slot"]

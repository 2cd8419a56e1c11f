"""A serving simulator faithful to vLLM's block pool, and the shadow (cache-mode) replay."""

from wakman.simulation.pool import BlockPool
from wakman.simulation.results import SimResult
from wakman.simulation.run import MODES, simulate
from wakman.simulation.server import ServerModel, VllmServer

__all__ = ["MODES", "BlockPool", "ServerModel", "SimResult", "VllmServer", "simulate"]

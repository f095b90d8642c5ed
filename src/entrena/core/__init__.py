"""Core: events, train state, the callback base class and the metric-key table."""

from entrena.core.callback import Callback
from entrena.core.events import Event
from entrena.core.metrics import METRIC_KEYS, MetricKey
from entrena.core.state import TrainState

__all__ = ["Callback", "Event", "METRIC_KEYS", "MetricKey", "TrainState"]

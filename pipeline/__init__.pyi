from pipeline.api import BadInput as BadInput
from pipeline.api import PipelineError as PipelineError
from pipeline.api import study as study
from pipeline.api import sweep as sweep
from pipeline.cards.card import write_card as card
from pipeline.results import Answer as Answer
from pipeline.results import Result as Result

__all__ = ["Answer", "BadInput", "PipelineError", "Result", "card", "study", "sweep"]

from pipeline.answer.card import write_card as card
from pipeline.answer.results import Answer as Answer
from pipeline.answer.results import Result as Result
from pipeline.api import BadInput as BadInput
from pipeline.api import PipelineError as PipelineError
from pipeline.api import study as study
from pipeline.api import sweep as sweep

__all__ = ["Answer", "BadInput", "PipelineError", "Result", "card", "study", "sweep"]

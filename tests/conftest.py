import sys
from pathlib import Path

# The reference predictor and helpers live beside the tests.
sys.path.insert(0, str(Path(__file__).parent))

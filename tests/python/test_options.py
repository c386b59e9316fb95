"""SessionOptions (graft's fields and PopART's names), Patterns, logging and module-level names."""
import warnings

import pytest

import graft
import graft.options


def test_graft_fields():
    o = graft.SessionOptions()
    assert o.constantWeights is True and o.numThreads == 0 and o.autoThreads is True
    o.numThreads = 2
    o.enableProfiling = True
    o.virtualGraphMode = graft.VirtualGraphMode.Manual
    o.autoRecomputation = graft.RecomputationType.Standard
    o.logDir = "/tmp/x"
    assert o.numThreads == 2 and o.virtualGraphMode == graft.VirtualGraphMode.Manual and o.logDir == "/tmp/x"
    o.accumulationAndReplicationReductionType = graft.ReductionType.Mean
    assert o.accumulationAndReplicationReductionType == graft.ReductionType.Mean
    names = set(graft.options.graft_option_names())
    assert names == {"enableGradientAccumulation", "accumulationFactor", "accumulationAndReplicationReductionType",
                     "virtualGraphMode", "enablePipelining",
                     "autoRecomputation", "enableReplicatedGraphs", "replicatedGraphCount", "constantWeights",
                     "meanAccumulationAndReplicationReductionStrategy", "enableDistributedReplicatedGraphs",
                     "globalReplicationFactor", "globalReplicaOffset", "collectiveTimeoutSeconds", "gradientBucketBytes",
                     "shardOptimizerState",
                     "numThreads", "autoThreads", "enableProfiling", "profileByNode", "enableBf16", "verifyPasses", "dumpGraphAfterPass",
                     "logDir",
                     "timelinePath", "pipelineDepth", "detectNonFinite"}
    with pytest.raises(graft.Error, match="numThreads must be of type int"):
        o.numThreads = "four"
    assert graft.SessionOptions(numThreads=3).numThreads == 3


def test_popart_options_are_accepted_with_one_warning():
    o = graft.SessionOptions()
    graft.options._warned.discard("enableStochasticRounding")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        o.enableStochasticRounding = True
        o.enableStochasticRounding = False
        assert o.enableStochasticRounding is False
    assert len([x for x in w if "enableStochasticRounding" in str(x.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        o.engineOptions = {"debug.instrument": "true"}
        o.engineOptions["opt.x"] = "y"
        o.convolutionOptions["partialsType"] = "half"
        o.executionPhaseSettings.phases = 2
        o.syntheticDataMode = graft.SyntheticDataMode.Off
        assert o.engineOptions == {"debug.instrument": "true", "opt.x": "y"}
        assert o.executionPhaseSettings.phases == 2
        assert set(o.ignoredOptions()) >= {"engineOptions", "convolutionOptions", "enableStochasticRounding"}


def test_unknown_options_raise_with_suggestions():
    o = graft.SessionOptions()
    with pytest.raises(graft.Error, match="did you mean numThreads"):
        o.numThread = 2
    with pytest.raises(graft.Error, match="did you mean enableProfiling"):
        o.enableProfilling = True
    with pytest.raises(graft.Error, match="no option 'wibble'"):
        o.wibble = 1
    with pytest.raises(graft.Error, match="did you mean constantWeights"):
        o.constantWeight


def test_options_reach_the_session():
    b = graft.Builder()
    x = b.addInputTensor("FLOAT", [2], "x")
    y = b.aiOnnx.relu([x])
    b.addOutputTensor(y)
    o = graft.SessionOptions()
    o.numThreads = -1
    with pytest.raises(graft.Error, match="numThreads must be >= 0"):
        graft.InferenceSession(b.getModelProto(), graft.DataFlow(1, [y]), graft.DeviceManager().createCpuDevice(),
                               userOptions=o)


def test_patterns():
    p = graft.Patterns()
    assert p.level == graft.PatternsLevel.Default and p.isPatternEnabled("PreUniRepl")
    p.InPlace = False
    assert p.InPlace is False and not p.isPatternEnabled("InPlace")
    assert graft.Patterns(graft.PatternsLevel.NoPatterns).isPatternEnabled("X") is False
    p2 = graft.Patterns(["PreUniRepl", "PostNRepl"]).enableRuntimeAsserts(False)
    assert p2.isPatternEnabled("PostNRepl")
    b = graft.Builder()
    x = b.addInputTensor("FLOAT", [2], "x")
    y = b.aiOnnx.relu([x])
    b.addOutputTensor(y)
    graft.InferenceSession(b.getModelProto(), graft.DataFlow(1, [y]), graft.DeviceManager().createCpuDevice(),
                           patterns=p2)
    with pytest.raises(graft.Error, match="patterns must be a graft.Patterns"):
        graft.InferenceSession(b.getModelProto(), graft.DataFlow(1, [y]), graft.DeviceManager().createCpuDevice(),
                               patterns=42)


def test_module_names():
    assert issubclass(graft.Error, RuntimeError)
    # A bug in graft is not a user error: `except graft.Error` must not take it.
    assert issubclass(graft.InternalError, RuntimeError)
    assert not issubclass(graft.InternalError, graft.Error) and not issubclass(graft.Error, graft.InternalError)
    assert graft.InternalError.__module__ == "graft"
    assert graft.popart_exception is graft.Error
    assert graft.reservedGradientPrefix() == "Gradient___"
    graft.getLogger().setLevel("WARN")
    with pytest.raises(graft.Error, match="unknown log level"):
        graft.getLogger().setLevel("LOUD")
    with pytest.raises(AttributeError, match="graft implements PopART's inference and training API"):
        graft.NoSuchThing
    info = graft.TensorInfo("FLOAT16", [1, 2])
    assert info.data_type() == "FLOAT16" and info.data_type_lcase() == "float16" and info.nelms() == 2
    import numpy as np

    assert graft.TensorInfo(np.zeros((2, 3), np.int64)).shape() == [2, 3]
    assert graft.TensorInfo(np.float32, [4]).data_type() == "FLOAT"
    with pytest.raises(graft.Error, match="unknown data type"):
        graft.TensorInfo("FLOATY", [1])

// The anchor of shardtrain_test_pch (tests/support/CMakeLists.txt): the target
// exists to compile the test drivers' precompiled header once; this file adds
// nothing to it.

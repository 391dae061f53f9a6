// The MJCF text of the built-in locomotion bodies (mjcf.cpp), compiled into the binary and loaded
// from memory (model.hpp), so finding a model file at run time can never fail.
#pragma once

namespace tandem::envs::mujoco {

extern const char* const kHopperXml;
extern const char* const kWalker2dXml;
extern const char* const kHalfCheetahXml;
extern const char* const kAntXml;
extern const char* const kHumanoidXml;

}  // namespace tandem::envs::mujoco

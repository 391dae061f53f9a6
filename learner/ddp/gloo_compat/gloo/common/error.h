// See gloo/rendezvous/store.h here: ProcessGroupGloo.hpp includes this but uses nothing from it.
#pragma once

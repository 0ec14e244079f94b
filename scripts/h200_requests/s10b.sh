#!/bin/bash
bash .gpuwt/install.sh
export VLMDECODE_GIT_SHA=$(cat .gpuwt/attn-pro.sha); bash .gpuwt/req.sh attn-pro

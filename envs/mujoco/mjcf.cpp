// The locomotion bodies, written for Tandem in MJCF and compiled into the binary, so no path lookup
// can fail at run time. Dimensions, masses (geom density), joint ranges, gears, contact parameters,
// time steps and integrators are the standard ones of the literature these tasks come from (the
// hopper and walker of Erez, Tassa & Todorov 2011, Wawrzynski's half-cheetah as in the DeepMind
// Control Suite, Schulman et al.'s quadruped "ant", the humanoid of Tassa, Erez & Todorov 2012, with
// the parameters of Gymnasium's humanoid.xml), which Gymnasium's v5 models also use, so the
// dynamics match Gymnasium's. The files are laid out in each body's local frame (Gymnasium's hopper
// and walker give global coordinates); docs/ENVS.md says where ours differ.
#include "envs/mujoco/mjcf.hpp"

namespace tandem::envs::mujoco {

// Three links under a planar torso; rootz's ref makes qpos[1] the torso's height (1.25 m standing).
const char* const kHopperXml = R"mjcf(<mujoco model="tandem-hopper">
  <compiler angle="degree" inertiafromgeom="true"/>
  <option timestep="0.002" integrator="RK4"/>
  <default>
    <joint limited="true" armature="1" damping="1"/>
    <geom contype="1" conaffinity="1" condim="1" margin="0.001" solimp=".8 .8 .01" solref=".02 1"/>
    <motor ctrllimited="true" ctrlrange="-1 1" gear="200"/>
  </default>
  <worldbody>
    <geom name="ground" type="plane" size="20 20 .125" condim="3"/>
    <body name="torso" pos="0 0 1.25">
      <joint name="rootx" type="slide" axis="1 0 0" limited="false" armature="0" damping="0"/>
      <joint name="rootz" type="slide" axis="0 0 1" ref="1.25" limited="false" armature="0" damping="0"/>
      <joint name="rooty" type="hinge" axis="0 1 0" limited="false" armature="0" damping="0"/>
      <geom name="torso_capsule" type="capsule" fromto="0 0 0.2 0 0 -0.2" size="0.05" friction="0.9"/>
      <body name="thigh" pos="0 0 -0.2">
        <joint name="thigh_hinge" type="hinge" axis="0 -1 0" range="-150 0"/>
        <geom name="thigh_capsule" type="capsule" fromto="0 0 0 0 0 -0.45" size="0.05" friction="0.9"/>
        <body name="leg" pos="0 0 -0.45">
          <joint name="leg_hinge" type="hinge" axis="0 -1 0" range="-150 0"/>
          <geom name="leg_capsule" type="capsule" fromto="0 0 0 0 0 -0.5" size="0.04" friction="0.9"/>
          <body name="foot" pos="0 0 -0.5">
            <joint name="foot_hinge" type="hinge" axis="0 -1 0" range="-45 45"/>
            <geom name="foot_capsule" type="capsule" fromto="-0.13 0 0 0.26 0 0" size="0.06" friction="2.0"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="thigh_motor" joint="thigh_hinge"/>
    <motor name="leg_motor" joint="leg_hinge"/>
    <motor name="foot_motor" joint="foot_hinge"/>
  </actuator>
</mujoco>
)mjcf";

// The hopper's torso with two legs; both feet at friction 1.9 (v2 to v4 gave the right foot 0.9 and
// the left 1.9; Gymnasium v5 gives both 1.9). Limbs collide with the ground only (conaffinity 0 on
// the body, 1 on the ground).
const char* const kWalker2dXml = R"mjcf(<mujoco model="tandem-walker2d">
  <compiler angle="degree" inertiafromgeom="true"/>
  <option timestep="0.002" integrator="RK4"/>
  <default>
    <joint limited="true" armature="0.01" damping="0.1"/>
    <geom contype="1" conaffinity="0" condim="3" density="1000" friction="0.9 0.1 0.1"/>
    <motor ctrllimited="true" ctrlrange="-1 1" gear="100"/>
  </default>
  <worldbody>
    <geom name="ground" type="plane" size="40 40 40" conaffinity="1"/>
    <body name="torso" pos="0 0 1.25">
      <joint name="rootx" type="slide" axis="1 0 0" limited="false" armature="0" damping="0"/>
      <joint name="rootz" type="slide" axis="0 0 1" ref="1.25" limited="false" armature="0" damping="0"/>
      <joint name="rooty" type="hinge" axis="0 1 0" limited="false" armature="0" damping="0"/>
      <geom name="torso_capsule" type="capsule" fromto="0 0 0.2 0 0 -0.2" size="0.05"/>
      <body name="right_thigh" pos="0 0 -0.2">
        <joint name="right_thigh_hinge" type="hinge" axis="0 -1 0" range="-150 0"/>
        <geom name="right_thigh_capsule" type="capsule" fromto="0 0 0 0 0 -0.45" size="0.05"/>
        <body name="right_leg" pos="0 0 -0.45">
          <joint name="right_leg_hinge" type="hinge" axis="0 -1 0" range="-150 0"/>
          <geom name="right_leg_capsule" type="capsule" fromto="0 0 0 0 0 -0.5" size="0.04"/>
          <body name="right_foot" pos="0 0 -0.5">
            <joint name="right_foot_hinge" type="hinge" axis="0 -1 0" range="-45 45"/>
            <geom name="right_foot_capsule" type="capsule" fromto="0 0 0 0.2 0 0" size="0.06" friction="1.9 0.1 0.1"/>
          </body>
        </body>
      </body>
      <body name="left_thigh" pos="0 0 -0.2">
        <joint name="left_thigh_hinge" type="hinge" axis="0 -1 0" range="-150 0"/>
        <geom name="left_thigh_capsule" type="capsule" fromto="0 0 0 0 0 -0.45" size="0.05"/>
        <body name="left_leg" pos="0 0 -0.45">
          <joint name="left_leg_hinge" type="hinge" axis="0 -1 0" range="-150 0"/>
          <geom name="left_leg_capsule" type="capsule" fromto="0 0 0 0 0 -0.5" size="0.04"/>
          <body name="left_foot" pos="0 0 -0.5">
            <joint name="left_foot_hinge" type="hinge" axis="0 -1 0" range="-45 45"/>
            <geom name="left_foot_capsule" type="capsule" fromto="0 0 0 0.2 0 0" size="0.06" friction="1.9 0.1 0.1"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="right_thigh_motor" joint="right_thigh_hinge"/>
    <motor name="right_leg_motor" joint="right_leg_hinge"/>
    <motor name="right_foot_motor" joint="right_foot_hinge"/>
    <motor name="left_thigh_motor" joint="left_thigh_hinge"/>
    <motor name="left_leg_motor" joint="left_leg_hinge"/>
    <motor name="left_foot_motor" joint="left_foot_hinge"/>
  </actuator>
</mujoco>
)mjcf";

// A planar cat: a 1 m torso and head, two three-link legs with spring-damper joints; 14 kg in all.
const char* const kHalfCheetahXml = R"mjcf(<mujoco model="tandem-half-cheetah">
  <compiler angle="radian" inertiafromgeom="true" settotalmass="14"/>
  <option timestep="0.01" gravity="0 0 -9.81"/>
  <default>
    <joint limited="true" armature="0.1" damping="0.01" stiffness="8" solimplimit="0 0.8 0.03" solreflimit="0.02 1"/>
    <geom contype="1" conaffinity="0" condim="3" friction="0.4 0.1 0.1" solimp="0 0.8 0.01" solref="0.02 1"/>
    <motor ctrllimited="true" ctrlrange="-1 1"/>
  </default>
  <worldbody>
    <geom name="ground" type="plane" size="40 40 40" conaffinity="1"/>
    <body name="torso" pos="0 0 0.7">
      <joint name="rootx" type="slide" axis="1 0 0" limited="false" armature="0" damping="0" stiffness="0"/>
      <joint name="rootz" type="slide" axis="0 0 1" limited="false" armature="0" damping="0" stiffness="0"/>
      <joint name="rooty" type="hinge" axis="0 1 0" limited="false" armature="0" damping="0" stiffness="0"/>
      <geom name="torso_capsule" type="capsule" fromto="-0.5 0 0 0.5 0 0" size="0.046"/>
      <geom name="head_capsule" type="capsule" pos="0.6 0 0.1" axisangle="0 1 0 0.87" size="0.046 0.15"/>
      <body name="back_thigh" pos="-0.5 0 0">
        <joint name="back_thigh_hinge" type="hinge" axis="0 1 0" range="-0.52 1.05" stiffness="240" damping="6"/>
        <geom name="back_thigh_capsule" type="capsule" pos="0.1 0 -0.13" axisangle="0 1 0 -3.8" size="0.046 0.145"/>
        <body name="back_shin" pos="0.16 0 -0.25">
          <joint name="back_shin_hinge" type="hinge" axis="0 1 0" range="-0.785 0.785" stiffness="180" damping="4.5"/>
          <geom name="back_shin_capsule" type="capsule" pos="-0.14 0 -0.07" axisangle="0 1 0 -2.03" size="0.046 0.15"/>
          <body name="back_foot" pos="-0.28 0 -0.14">
            <joint name="back_foot_hinge" type="hinge" axis="0 1 0" range="-0.4 0.785" stiffness="120" damping="3"/>
            <geom name="back_foot_capsule" type="capsule" pos="0.03 0 -0.097" axisangle="0 1 0 -0.27" size="0.046 0.094"/>
          </body>
        </body>
      </body>
      <body name="front_thigh" pos="0.5 0 0">
        <joint name="front_thigh_hinge" type="hinge" axis="0 1 0" range="-1 0.7" stiffness="180" damping="4.5"/>
        <geom name="front_thigh_capsule" type="capsule" pos="-0.07 0 -0.12" axisangle="0 1 0 0.52" size="0.046 0.133"/>
        <body name="front_shin" pos="-0.14 0 -0.24">
          <joint name="front_shin_hinge" type="hinge" axis="0 1 0" range="-1.2 0.87" stiffness="120" damping="3"/>
          <geom name="front_shin_capsule" type="capsule" pos="0.065 0 -0.09" axisangle="0 1 0 -0.6" size="0.046 0.106"/>
          <body name="front_foot" pos="0.13 0 -0.18">
            <joint name="front_foot_hinge" type="hinge" axis="0 1 0" range="-0.5 0.5" stiffness="60" damping="1.5"/>
            <geom name="front_foot_capsule" type="capsule" pos="0.045 0 -0.07" axisangle="0 1 0 -0.6" size="0.046 0.07"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="back_thigh_motor" joint="back_thigh_hinge" gear="120"/>
    <motor name="back_shin_motor" joint="back_shin_hinge" gear="90"/>
    <motor name="back_foot_motor" joint="back_foot_hinge" gear="60"/>
    <motor name="front_thigh_motor" joint="front_thigh_hinge" gear="120"/>
    <motor name="front_shin_motor" joint="front_shin_hinge" gear="60"/>
    <motor name="front_foot_motor" joint="front_foot_hinge" gear="30"/>
  </actuator>
</mujoco>
)mjcf";

// A sphere torso on a free joint with four two-joint legs along the diagonals; 14 bodies with the
// world, which is what the 78 contact-force observations (13 x 6) count.
const char* const kAntXml = R"mjcf(<mujoco model="tandem-ant">
  <compiler angle="degree" inertiafromgeom="true"/>
  <option timestep="0.01" integrator="RK4"/>
  <default>
    <joint limited="true" armature="1" damping="1"/>
    <geom contype="1" conaffinity="0" condim="3" density="5" friction="1 0.5 0.5" margin="0.01"/>
    <motor ctrllimited="true" ctrlrange="-1 1" gear="150"/>
  </default>
  <worldbody>
    <geom name="ground" type="plane" size="40 40 40" conaffinity="1"/>
    <body name="torso" pos="0 0 0.75">
      <joint name="root" type="free" limited="false" armature="0" damping="0" margin="0.01"/>
      <geom name="torso_sphere" type="sphere" size="0.25"/>
      <body name="front_left_hip" pos="0 0 0">
        <geom name="front_left_hip_capsule" type="capsule" fromto="0 0 0 0.2 0.2 0" size="0.08"/>
        <body name="front_left_thigh" pos="0.2 0.2 0">
          <joint name="front_left_hip_hinge" type="hinge" axis="0 0 1" range="-30 30"/>
          <geom name="front_left_thigh_capsule" type="capsule" fromto="0 0 0 0.2 0.2 0" size="0.08"/>
          <body name="front_left_shin" pos="0.2 0.2 0">
            <joint name="front_left_ankle_hinge" type="hinge" axis="-1 1 0" range="30 70"/>
            <geom name="front_left_shin_capsule" type="capsule" fromto="0 0 0 0.4 0.4 0" size="0.08"/>
          </body>
        </body>
      </body>
      <body name="back_left_hip" pos="0 0 0">
        <geom name="back_left_hip_capsule" type="capsule" fromto="0 0 0 -0.2 0.2 0" size="0.08"/>
        <body name="back_left_thigh" pos="-0.2 0.2 0">
          <joint name="back_left_hip_hinge" type="hinge" axis="0 0 1" range="-30 30"/>
          <geom name="back_left_thigh_capsule" type="capsule" fromto="0 0 0 -0.2 0.2 0" size="0.08"/>
          <body name="back_left_shin" pos="-0.2 0.2 0">
            <joint name="back_left_ankle_hinge" type="hinge" axis="1 1 0" range="-70 -30"/>
            <geom name="back_left_shin_capsule" type="capsule" fromto="0 0 0 -0.4 0.4 0" size="0.08"/>
          </body>
        </body>
      </body>
      <body name="back_right_hip" pos="0 0 0">
        <geom name="back_right_hip_capsule" type="capsule" fromto="0 0 0 -0.2 -0.2 0" size="0.08"/>
        <body name="back_right_thigh" pos="-0.2 -0.2 0">
          <joint name="back_right_hip_hinge" type="hinge" axis="0 0 1" range="-30 30"/>
          <geom name="back_right_thigh_capsule" type="capsule" fromto="0 0 0 -0.2 -0.2 0" size="0.08"/>
          <body name="back_right_shin" pos="-0.2 -0.2 0">
            <joint name="back_right_ankle_hinge" type="hinge" axis="-1 1 0" range="-70 -30"/>
            <geom name="back_right_shin_capsule" type="capsule" fromto="0 0 0 -0.4 -0.4 0" size="0.08"/>
          </body>
        </body>
      </body>
      <body name="front_right_hip" pos="0 0 0">
        <geom name="front_right_hip_capsule" type="capsule" fromto="0 0 0 0.2 -0.2 0" size="0.08"/>
        <body name="front_right_thigh" pos="0.2 -0.2 0">
          <joint name="front_right_hip_hinge" type="hinge" axis="0 0 1" range="-30 30"/>
          <geom name="front_right_thigh_capsule" type="capsule" fromto="0 0 0 0.2 -0.2 0" size="0.08"/>
          <body name="front_right_shin" pos="0.2 -0.2 0">
            <joint name="front_right_ankle_hinge" type="hinge" axis="1 1 0" range="30 70"/>
            <geom name="front_right_shin_capsule" type="capsule" fromto="0 0 0 0.4 -0.4 0" size="0.08"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="front_right_hip_motor" joint="front_right_hip_hinge"/>
    <motor name="front_right_ankle_motor" joint="front_right_ankle_hinge"/>
    <motor name="front_left_hip_motor" joint="front_left_hip_hinge"/>
    <motor name="front_left_ankle_motor" joint="front_left_ankle_hinge"/>
    <motor name="back_left_hip_motor" joint="back_left_hip_hinge"/>
    <motor name="back_left_ankle_motor" joint="back_left_ankle_hinge"/>
    <motor name="back_right_hip_motor" joint="back_right_hip_hinge"/>
    <motor name="back_right_ankle_motor" joint="back_right_ankle_hinge"/>
  </actuator>
</mujoco>
)mjcf";

// A torso (chest, head, upper waist) on a free joint at 1.4 m; the lower waist and pelvis on a
// three-axis abdomen; two legs of thigh, shin and foot sphere on three hip hinges and a knee; two arms
// of upper and lower arm on two shoulder hinges and an elbow. 14 bodies with the world: what the
// 130 cinert, 78 cvel and 78 contact-force observations count (13 x 10, 13 x 6, 13 x 6). The hinges
// are springs (stiffness, damping and armature per joint, as published: the left knee has stiffness 1,
// the right none); the two fixed tendons (hip pitch against knee) have no stiffness, damping or limit,
// so they apply no force. Body-body contacts are frictionless (condim 1); the ground gives friction.
const char* const kHumanoidXml = R"mjcf(<mujoco model="tandem-humanoid">
  <compiler angle="degree" inertiafromgeom="true"/>
  <option timestep="0.003" integrator="RK4" solver="PGS" iterations="50"/>
  <default>
    <joint limited="true" armature="1" damping="1"/>
    <geom contype="1" conaffinity="1" condim="1" margin="0.001"/>
    <motor ctrllimited="true" ctrlrange="-0.4 0.4"/>
  </default>
  <worldbody>
    <geom name="ground" type="plane" size="20 20 0.125" condim="3" friction="1 0.1 0.1"/>
    <body name="torso" pos="0 0 1.4">
      <joint name="root" type="free" limited="false" armature="0" damping="0" stiffness="0"/>
      <geom name="chest_capsule" type="capsule" fromto="0 -0.07 0 0 0.07 0" size="0.07"/>
      <geom name="head_sphere" type="sphere" pos="0 0 0.19" size="0.09"/>
      <geom name="upper_waist_capsule" type="capsule" fromto="-0.01 -0.06 -0.12 -0.01 0.06 -0.12" size="0.06"/>
      <body name="lower_waist" pos="-0.01 0 -0.26" quat="1 0 -0.002 0">
        <geom name="lower_waist_capsule" type="capsule" fromto="0 -0.06 0 0 0.06 0" size="0.06"/>
        <joint name="abdomen_z" type="hinge" pos="0 0 0.065" axis="0 0 1" range="-45 45" stiffness="20" damping="5" armature="0.02"/>
        <joint name="abdomen_y" type="hinge" pos="0 0 0.065" axis="0 1 0" range="-75 30" stiffness="10" damping="5" armature="0.02"/>
        <body name="pelvis" pos="0 0 -0.165" quat="1 0 -0.002 0">
          <joint name="abdomen_x" type="hinge" pos="0 0 0.1" axis="1 0 0" range="-35 35" stiffness="10" damping="5" armature="0.02"/>
          <geom name="pelvis_capsule" type="capsule" fromto="-0.02 -0.07 0 -0.02 0.07 0" size="0.09"/>
          <body name="right_thigh" pos="0 -0.1 -0.04">
            <joint name="right_hip_x" type="hinge" axis="1 0 0" range="-25 5" stiffness="10" damping="5" armature="0.01"/>
            <joint name="right_hip_z" type="hinge" axis="0 0 1" range="-60 35" stiffness="10" damping="5" armature="0.01"/>
            <joint name="right_hip_y" type="hinge" axis="0 1 0" range="-110 20" stiffness="20" damping="5" armature="0.008"/>
            <geom name="right_thigh_capsule" type="capsule" fromto="0 0 0 0 0.01 -0.34" size="0.06"/>
            <body name="right_shin" pos="0 0.01 -0.403">
              <joint name="right_knee" type="hinge" pos="0 0 0.02" axis="0 -1 0" range="-160 -2" armature="0.006"/>
              <geom name="right_shin_capsule" type="capsule" fromto="0 0 0 0 0 -0.3" size="0.049"/>
              <body name="right_foot" pos="0 0 -0.45">
                <geom name="right_foot_sphere" type="sphere" pos="0 0 0.1" size="0.075"/>
              </body>
            </body>
          </body>
          <body name="left_thigh" pos="0 0.1 -0.04">
            <joint name="left_hip_x" type="hinge" axis="-1 0 0" range="-25 5" stiffness="10" damping="5" armature="0.01"/>
            <joint name="left_hip_z" type="hinge" axis="0 0 -1" range="-60 35" stiffness="10" damping="5" armature="0.01"/>
            <joint name="left_hip_y" type="hinge" axis="0 1 0" range="-110 20" stiffness="20" damping="5" armature="0.01"/>
            <geom name="left_thigh_capsule" type="capsule" fromto="0 0 0 0 -0.01 -0.34" size="0.06"/>
            <body name="left_shin" pos="0 -0.01 -0.403">
              <joint name="left_knee" type="hinge" pos="0 0 0.02" axis="0 -1 0" range="-160 -2" stiffness="1" armature="0.006"/>
              <geom name="left_shin_capsule" type="capsule" fromto="0 0 0 0 0 -0.3" size="0.049"/>
              <body name="left_foot" pos="0 0 -0.45">
                <geom name="left_foot_sphere" type="sphere" pos="0 0 0.1" size="0.075"/>
              </body>
            </body>
          </body>
        </body>
      </body>
      <body name="right_upper_arm" pos="0 -0.17 0.06">
        <joint name="right_shoulder1" type="hinge" axis="2 1 1" range="-85 60" stiffness="1" armature="0.0068"/>
        <joint name="right_shoulder2" type="hinge" axis="0 -1 1" range="-85 60" stiffness="1" armature="0.0051"/>
        <geom name="right_upper_arm_capsule" type="capsule" fromto="0 0 0 0.16 -0.16 -0.16" size="0.04"/>
        <body name="right_lower_arm" pos="0.18 -0.18 -0.18">
          <joint name="right_elbow" type="hinge" axis="0 -1 1" range="-90 50" armature="0.0028"/>
          <geom name="right_lower_arm_capsule" type="capsule" fromto="0.01 0.01 0.01 0.17 0.17 0.17" size="0.031"/>
          <geom name="right_hand_sphere" type="sphere" pos="0.18 0.18 0.18" size="0.04"/>
        </body>
      </body>
      <body name="left_upper_arm" pos="0 0.17 0.06">
        <joint name="left_shoulder1" type="hinge" axis="2 -1 1" range="-60 85" stiffness="1" armature="0.0068"/>
        <joint name="left_shoulder2" type="hinge" axis="0 1 1" range="-60 85" stiffness="1" armature="0.0051"/>
        <geom name="left_upper_arm_capsule" type="capsule" fromto="0 0 0 0.16 0.16 -0.16" size="0.04"/>
        <body name="left_lower_arm" pos="0.18 0.18 -0.18">
          <joint name="left_elbow" type="hinge" axis="0 -1 -1" range="-90 50" armature="0.0028"/>
          <geom name="left_lower_arm_capsule" type="capsule" fromto="0.01 -0.01 0.01 0.17 -0.17 0.17" size="0.031"/>
          <geom name="left_hand_sphere" type="sphere" pos="0.18 -0.18 0.18" size="0.04"/>
        </body>
      </body>
    </body>
  </worldbody>
  <tendon>
    <fixed name="left_hip_knee">
      <joint joint="left_hip_y" coef="-1"/>
      <joint joint="left_knee" coef="1"/>
    </fixed>
    <fixed name="right_hip_knee">
      <joint joint="right_hip_y" coef="-1"/>
      <joint joint="right_knee" coef="1"/>
    </fixed>
  </tendon>
  <actuator>
    <motor name="abdomen_y_motor" joint="abdomen_y" gear="100"/>
    <motor name="abdomen_z_motor" joint="abdomen_z" gear="100"/>
    <motor name="abdomen_x_motor" joint="abdomen_x" gear="100"/>
    <motor name="right_hip_x_motor" joint="right_hip_x" gear="100"/>
    <motor name="right_hip_z_motor" joint="right_hip_z" gear="100"/>
    <motor name="right_hip_y_motor" joint="right_hip_y" gear="300"/>
    <motor name="right_knee_motor" joint="right_knee" gear="200"/>
    <motor name="left_hip_x_motor" joint="left_hip_x" gear="100"/>
    <motor name="left_hip_z_motor" joint="left_hip_z" gear="100"/>
    <motor name="left_hip_y_motor" joint="left_hip_y" gear="300"/>
    <motor name="left_knee_motor" joint="left_knee" gear="200"/>
    <motor name="right_shoulder1_motor" joint="right_shoulder1" gear="25"/>
    <motor name="right_shoulder2_motor" joint="right_shoulder2" gear="25"/>
    <motor name="right_elbow_motor" joint="right_elbow" gear="25"/>
    <motor name="left_shoulder1_motor" joint="left_shoulder1" gear="25"/>
    <motor name="left_shoulder2_motor" joint="left_shoulder2" gear="25"/>
    <motor name="left_elbow_motor" joint="left_elbow" gear="25"/>
  </actuator>
</mujoco>
)mjcf";

}  // namespace tandem::envs::mujoco

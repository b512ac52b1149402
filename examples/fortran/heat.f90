! heat: explicit 1-D heat equation with a moving source, checkpointed with eckpt from Fortran.
!
!   heat N STEPS INTERVAL [STOP_AFTER]
!
! Protects the grid and the step counter, restores them if a checkpoint exists, checkpoints
! every INTERVAL steps and after the last, and prints the state's checksum at each checkpoint,
! after a restart and at the end. STOP_AFTER ends the run abruptly after that step (no
! finalize, exit status 3), as a crash would, to show that a rerun resumes from the checkpoint.
!
!   gfortran -O2 include/eckpt.f90 examples/fortran/heat.f90 -Ltarget/release -leckpt -o heat
!   ECKPT_DIR=/tmp/ck ./heat 100000 50 10 25; ECKPT_DIR=/tmp/ck ./heat 100000 50 10
program heat
  use, intrinsic :: iso_c_binding, only: c_int, c_int64_t, c_double
  use eckpt
  implicit none

  real(c_double), allocatable, target :: grid(:)
  real(c_double), allocatable :: old(:)
  integer(c_int64_t), target :: step
  integer(c_int64_t) :: steps, interval, stop_after
  integer :: n, i
  integer(c_int) :: rc

  n = int(argument(1, 0_c_int64_t))
  steps = argument(2, 0_c_int64_t)
  interval = argument(3, 0_c_int64_t)
  stop_after = argument(4, -1_c_int64_t)
  if (n < 3 .or. steps < 1 .or. interval < 1) then
    write (*, '(a)') 'usage: heat N STEPS INTERVAL [STOP_AFTER]'
    error stop 2
  end if
  allocate(grid(n), old(n))

  call check(eckpt_init(), 'eckpt_init')
  call check(eckpt_protect(0, grid), 'eckpt_protect(grid)')
  call check(eckpt_protect(1, step), 'eckpt_protect(step)')

  rc = eckpt_restart()
  call check(rc, 'eckpt_restart')
  if (rc > 0) then
    write (*, '(a, i0, a, i0, a, es24.17)') 'restarted epoch ', rc, ' step ', step, ' checksum ', checksum()
  else
    step = 0
    do i = 1, n
      grid(i) = sin(0.01_c_double * i)
    end do
  end if

  do while (step < steps)
    old = grid
    do i = 2, n - 1
      grid(i) = old(i) + 0.25_c_double * (old(i - 1) - 2 * old(i) + old(i + 1)) &
                + 1.0e-3_c_double * sin(0.1_c_double * step + 0.001_c_double * i)
    end do
    step = step + 1
    if (mod(step, interval) == 0 .or. step == steps) then
      rc = eckpt_checkpoint()
      call check(rc, 'eckpt_checkpoint')
      write (*, '(a, i0, a, i0, a, es24.17)') 'checkpoint epoch ', rc, ' step ', step, ' checksum ', checksum()
    end if
    if (step == stop_after) then
      write (*, '(a, i0)') 'stopping abruptly after step ', step
      error stop 3
    end if
  end do

  write (*, '(a, es24.17)') 'checksum: ', checksum()
  call check(eckpt_finalize(), 'eckpt_finalize')

contains

  ! The I-th command-line argument as an integer, or `default` when it is absent.
  function argument(index, default) result(value)
    integer, intent(in) :: index
    integer(c_int64_t), intent(in) :: default
    integer(c_int64_t) :: value
    character(len=32) :: text
    integer :: status
    value = default
    if (command_argument_count() < index) return
    call get_command_argument(index, text)
    read (text, *, iostat=status) value
    if (status /= 0) then
      write (*, '(a, a)') 'not a number: ', trim(text)
      error stop 2
    end if
  end function argument

  ! Position-weighted sum of the grid plus the step counter: any restored value that differs
  ! changes it (printed with 17 significant digits, enough to tell doubles apart).
  function checksum() result(s)
    real(c_double) :: s
    integer :: j
    s = real(step, c_double)
    do j = 1, n
      s = s + grid(j) * j
    end do
  end function checksum

  subroutine check(code, what)
    integer(c_int), intent(in) :: code
    character(len=*), intent(in) :: what
    if (code < 0) then
      write (*, '(a, a, a)') what, ' failed: ', eckpt_error_message(code)
      error stop 1
    end if
  end subroutine check

end program heat
